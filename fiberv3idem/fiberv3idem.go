package fiberv3idem

import (
	"errors"
	"strings"

	"github.com/gofiber/fiber/v3"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/httpadapt"
)

// New returns the idempotency middleware; see the package documentation
// for where to mount it. It panics without Config.Engine.
func New(config ...Config) fiber.Handler {
	cfg := configDefault(config...)
	eng := cfg.Engine
	held := any(heldKey{eng}) // boxed once: Locals' key
	var apps httpadapt.AppCache[*fiber.App, appConfig]
	return func(c fiber.Ctx) error {
		if cfg.Next != nil && cfg.Next(c) {
			return c.Next()
		}
		req := c.Request()
		method := c.Method()
		app := apps.Get(c.App(), readConfig)
		header, keyed := httpadapt.FastHeaders(&req.Header, app.foldsHeaders)
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
		route := routeTemplate(c, &app.routing)
		res := c.Response()
		st := &httpadapt.FastState{Ctx: httpadapt.LocalsContext{Context: c.Context(), Locals: c}}
		st.Preset.Preset = true
		for k, v := range res.Header.All() {
			st.Preset.Add(k, v)
		}
		st.Req = core.Request{
			Context:        &st.Ctx,
			Method:         httpadapt.StableMethod(method),
			Route:          route,
			Path:           strings.Clone(c.Path()),
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
			if linger := httpadapt.Linger(res, &res.Header, c.RequestCtx().Conn()); linger != nil {
				c.RequestCtx().Hijack(linger)
				c.RequestCtx().HijackSetNoResponse(true)
			}
		}
		switch {
		case resp != nil && resp.Problem != nil && cfg.ErrorHandler != nil:
			httpadapt.FastProblemHeaders(&res.Header, resp)
			return cfg.ErrorHandler(c, resp.Problem)
		case resp != nil:
			httpadapt.WriteResponse(res, &res.Header, resp)
			return nil // a replay or a refusal: later handlers do not run
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
		c.SetContext(f.NewContext(c.Context())) // core.InfoFromContext
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
		if c.RequestCtx().Hijacked() {
			return nil // the deferred Abort releases the lock
		}
		if res.IsBodyStream() {
			if !f.Buffered() {
				return nil // sent after the handler returns: not stored
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

// appConfig is what the middleware reads of an app's Config.
type appConfig struct {
	foldsHeaders bool
	routing      fiber.Config // StrictRouting and CaseSensitive only, for RoutePatternMatch
}

func readConfig(app *fiber.App) appConfig {
	c := app.Config()
	return appConfig{c.DisableHeaderNormalizing, fiber.Config{StrictRouting: c.StrictRouting, CaseSensitive: c.CaseSensitive}}
}

// routeTemplate returns the template of the route being served
// ("/orders/:id"), or "" (unknown to the Engine) under app.Use or Group
// middleware: Fiber runs those before it has picked the handler's route
// (c.Matched() is false), or, after a route's handler called c.Next(),
// c.Route() is the Use route, whose Path is a prefix that does not match
// the whole path. The path is matched as the router matched it: a trailing
// slash and the case ignored unless the app's StrictRouting and
// CaseSensitive say otherwise.
func routeTemplate(c fiber.Ctx, routing *fiber.Config) string {
	if !c.Matched() {
		return ""
	}
	r, path := c.Route(), c.Path()
	if r.Path == path {
		return r.Path
	}
	if !routing.StrictRouting && len(path) > 1 {
		path = strings.TrimRight(path, "/")
	}
	if !fiber.RoutePatternMatch(path, r.Path, *routing) {
		return ""
	}
	return r.Path // registered at start-up: not a request buffer
}

// unrouted reports whether err is the 404 or 405 of Fiber's router, which
// a Use middleware meets for a URL no route matches: sent, not stored, so
// that the key stays free for the right URL.
func unrouted(err error) bool {
	var fe *fiber.Error
	return errors.As(err, &fe) && (fe.Code == fiber.StatusNotFound || fe.Code == fiber.StatusMethodNotAllowed)
}

// heldKey is the Locals key that marks a request whose key a middleware of
// Engine e holds, while the chain it runs may route the request again.
type heldKey struct{ e *core.Engine }
