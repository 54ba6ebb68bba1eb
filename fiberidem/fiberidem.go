package fiberidem

import (
	"errors"
	"reflect"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/httpadapt"
)

// New returns the idempotency middleware; see the package documentation
// for where to mount it. It panics without Config.Engine.
func New(config ...Config) fiber.Handler {
	cfg := configDefault(config...)
	eng := cfg.Engine
	held := any(heldKey{eng}) // boxed once: Locals' key
	var apps httpadapt.AppCache[*fiber.App, bool]
	return func(c *fiber.Ctx) error {
		if cfg.Next != nil && cfg.Next(c) {
			return c.Next()
		}
		req := c.Request()
		method := c.Method()
		header, keyed := httpadapt.FastHeaders(&req.Header, apps.Get(c.App(), foldsHeaders))
		if !eng.Keyed(method, keyed) {
			return c.Next() // nothing to read or copy without a key
		}
		if c.Locals(held) != nil {
			// Routed again (c.RestartRouting) through a middleware of this
			// Engine: its first pass holds the key and stores what the chain
			// answers. A lease in the request's context is not that: another
			// Engine's, or one the app put there (core.Do's).
			return c.Next()
		}
		route := routeTemplate(c)
		res := c.Response()
		st := &httpadapt.FastState{Ctx: httpadapt.LocalsContext{Context: c.UserContext(), Locals: c}}
		st.Preset.Preset = true
		for k, v := range res.Header.All() {
			st.Preset.Add(k, v)
		}
		st.Req = core.Request{
			Context:        &st.Ctx,
			Method:         httpadapt.StableMethod(method),
			Route:          route,
			Path:           utils.CopyString(c.Path()),
			Query:          string(req.URI().QueryString()),
			Header:         header,
			Body:           st.Body(req),
			ContentLength:  httpadapt.ContentLength(req.Header.ContentLength()),
			ResponseHeader: st.Preset.Header,
		}
		f, resp := eng.Begin(&st.Req)
		if resp != nil && st.LeftUnread() {
			// Answer on the connection, then wait for the client to read it
			// (docs/design.md, "fiberidem").
			if linger := httpadapt.Linger(res, &res.Header, c.Context().Conn()); linger != nil {
				c.Context().Hijack(linger)
				c.Context().HijackSetNoResponse(true)
			}
		}
		switch {
		case resp != nil && resp.Problem != nil && cfg.ErrorHandler != nil:
			httpadapt.FastProblemHeaders(&res.Header, resp)
			return cfg.ErrorHandler(c, resp.Problem)
		case resp != nil:
			httpadapt.WriteResponse(res, &res.Header, resp)
			return nil // a replay or an error: later handlers do not run
		case f == nil:
			return c.Next()
		}
		returned := false
		defer func() {
			if !returned && f.Buffered() {
				// A panic: none of the handler's response is sent, nor its headers.
				httpadapt.ResetHeader(&res.Header, st.Preset.Header)
			}
			f.Abort() // a panic: the lock is released, nothing stored
		}()
		if req.IsBodyStream() {
			req.SetBodyRaw(f.Body()) // Begin consumed the stream
		}
		c.SetUserContext(f.NewContext(c.UserContext())) // core.InfoFromContext
		c.Locals(held, true)
		defer c.Locals(held, nil) // routed again once this pass has ended: protected again

		err := c.Next()
		returned = true
		if err != nil {
			// Render the error now, as Fiber would after the chain, so that
			// what the client receives is what is stored.
			if c.App().ErrorHandler(c, err) != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
			if route == "" && unrouted(err) {
				return nil // the deferred Abort releases the key
			}
		}
		if c.Context().Hijacked() {
			return nil // the deferred Abort releases the lock
		}
		if res.IsBodyStream() {
			if !f.Buffered() {
				return nil // streamed: the deferred Abort releases the lock
			}
			// A Buffered flight's response commits whole, before any of it is sent.
			if err := httpadapt.ReadBodyStream(res); err != nil {
				return err // the deferred Abort rolls back; Fiber answers 500
			}
		}
		f.Write(res.Body()) //nolint:errcheck // never fails; Write copies
		for k, v := range res.Header.All() {
			st.Sent.Add(k, v)
		}
		if !httpadapt.SentContentType(&res.Header, res.StatusCode(), len(res.Body())) {
			delete(st.Sent.Header, "Content-Type") // fasthttp's default, not sent
		}
		if failed := f.Complete(res.StatusCode(), st.Sent.Header); failed != nil {
			// A Buffered flight that failed to commit: nothing of the
			// handler's was kept, nor is any of it sent.
			httpadapt.ResetHeader(&res.Header, st.Preset.Header)
			if cfg.ErrorHandler != nil {
				res.ResetBody()
				res.SetStatusCode(failed.StatusCode)
				httpadapt.FastProblemHeaders(&res.Header, failed)
				return cfg.ErrorHandler(c, failed.Problem)
			}
			httpadapt.WriteResponse(res, &res.Header, failed)
		}
		return nil
	}
}

func foldsHeaders(app *fiber.App) bool { return app.Config().DisableHeaderNormalizing }

// routeTemplate returns the template of the route being served
// ("/orders/:id"), or "" (unknown to the Engine) when c.Route() is
// a Use route: under app.Use or Group middleware, Fiber v2 runs the
// middleware before it has picked the handler's route, and c.Route() is the
// Use route, a path prefix such as "/".
func routeTemplate(c *fiber.Ctx) string {
	r := c.Route()
	if isUseRoute(c, r) {
		return ""
	}
	return r.Path // registered at start-up: not a request buffer
}

// unrouted reports whether err is the 404 or 405 of Fiber's router, which
// a Use middleware meets when the request matches no route ("Cannot POST
// /orderz"). Such a response is sent but not stored, as with the other
// adapters, so that a key sent to a wrong URL stays free for the right one.
// A handler behind app.Use that returns a 404 or 405 *fiber.Error itself is
// treated the same way (a retry runs it again); one behind a middleware
// mounted on its route is stored as usual.
func unrouted(err error) bool {
	var fe *fiber.Error
	return errors.As(err, &fe) && (fe.Code == fiber.StatusNotFound || fe.Code == fiber.StatusMethodNotAllowed)
}

// useField is the index of fiber.Route's unexported "use" flag, read by
// reflection (docs/design.md, "fiberidem"); TestUseFieldFound guards it.
var useField = func() []int {
	f, ok := reflect.TypeOf(fiber.Route{}).FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil
	}
	return f.Index
}()

func isUseRoute(c *fiber.Ctx, r *fiber.Route) bool {
	if useField != nil {
		return reflect.ValueOf(r).Elem().FieldByIndex(useField).Bool() // reads, allocates nothing
	}
	// A Fiber without the flag: a route whose pattern does not match the
	// whole path, as the router matched it (a trailing slash ignored unless
	// StrictRouting), is a Use prefix (slower: parses the pattern).
	path := c.Path()
	if r.Path == path {
		return false
	}
	cfg := c.App().Config()
	if !cfg.StrictRouting && len(path) > 1 {
		path = strings.TrimRight(path, "/")
	}
	return !fiber.RoutePatternMatch(path, r.Path, cfg)
}

// heldKey is the Locals key that marks a request whose key a middleware of
// Engine e holds, while the chain it runs may route the request again.
type heldKey struct{ e *core.Engine }
