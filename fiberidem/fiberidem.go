package fiberidem

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/valyala/fasthttp"

	"github.com/idem-go/idem/core"
)

// New returns the idempotency middleware; see the package documentation
// for where to mount it.
func New(config ...Config) fiber.Handler {
	cfg := configDefault(config...)
	eng := cfg.Engine
	var apps appCache
	return func(c *fiber.Ctx) error {
		if cfg.Next != nil && cfg.Next(c) {
			return c.Next()
		}
		method := c.Method()
		req := c.Request()
		var header, keyed core.HeaderGetter = requestHeader{&req.Header}, presentHeader{&req.Header}
		if apps.foldsHeaders(c.App()) {
			header, keyed = foldedHeader{&req.Header}, foldedHeader{&req.Header}
		}
		if !eng.Keyed(method, keyed) {
			return c.Next() // nothing to read or copy without a key
		}
		var body io.Reader
		if req.IsBodyStream() { // Fiber's StreamRequestBody: read once, bounded
			body = req.BodyStream()
		} else if b := req.Body(); len(b) > 0 {
			body = bytes.NewReader(b)
		}
		contentLength := int64(req.Header.ContentLength())
		if contentLength < 0 {
			contentLength = -1 // chunked or unknown
		}
		route := routeTemplate(c)
		f, resp := eng.Begin(&core.Request{
			Context:        localsContext{Context: c.UserContext(), c: c},
			Method:         stableMethod(method),
			Route:          route,
			Path:           utils.CopyString(c.Path()),
			Query:          string(req.URI().QueryString()),
			Header:         header,
			Body:           body,
			ContentLength:  contentLength,
			ResponseHeader: presetHeader(&c.Response().Header),
		})
		switch {
		case resp != nil && resp.Problem != nil && cfg.ErrorHandler != nil:
			for k, vs := range resp.Header {
				if k != fiber.HeaderContentType {
					for _, v := range vs {
						c.Response().Header.Add(k, v)
					}
				}
			}
			return cfg.ErrorHandler(c, resp.Problem)
		case resp != nil:
			writeResponse(c, resp)
			return nil // a replay or an error: later handlers do not run
		case f == nil:
			return c.Next()
		}
		defer f.Abort() // a panic: the lock is released, nothing stored
		if req.IsBodyStream() {
			req.SetBodyRaw(f.Body()) // Begin consumed the stream
		}

		if err := c.Next(); err != nil {
			// Render the error now, as Fiber would after the chain, so that
			// what the client receives is what is stored.
			if c.App().ErrorHandler(c, err) != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
			if route == "" && unrouted(err) {
				return nil // the deferred Abort releases the key
			}
		}
		res := c.Response()
		if res.IsBodyStream() || c.Context().Hijacked() {
			return nil // streamed: the deferred Abort releases the lock
		}
		f.Write(res.Body()) //nolint:errcheck // never fails; Write copies
		f.Complete(res.StatusCode(), responseHeader(&res.Header))
		return nil
	}
}

// routeTemplate returns the template of the route being served
// ("/orders/:id"), or "" (the Engine then uses the path) when c.Route() is
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

// useField is the index of fiber.Route's unexported "use" flag. Fiber v2
// has no public way to tell a Use route: its Method is the request's and
// its Path a prefix.
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
	// whole path is a Use prefix (slower: parses the pattern).
	return r.Path != c.Path() && !fiber.RoutePatternMatch(c.Path(), r.Path, c.App().Config())
}

// stableMethod returns method as a constant string: Fiber's c.Method()
// points into fasthttp's request buffer, reused by the next request.
func stableMethod(method string) string {
	switch method {
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	}
	return utils.CopyString(method)
}

// appCache remembers whether the app that last served a request disables
// header normalizing (fiber.Config.DisableHeaderNormalizing): App.Config
// copies the whole Config, too much to do per request.
type appCache struct{ last atomic.Pointer[appHeaders] }

type appHeaders struct {
	app  *fiber.App
	fold bool
}

// foldsHeaders reports whether the key headers must be looked up in app's
// requests ignoring case: with normalizing disabled, fasthttp keeps header
// names as sent and matches them byte for byte, and a key sent as
// "idempotency-key" (as HTTP/2 and proxies such as Envoy send names) would
// not be found, leaving the request unprotected.
func (a *appCache) foldsHeaders(app *fiber.App) bool {
	if last := a.last.Load(); last != nil && last.app == app {
		return last.fold
	}
	last := &appHeaders{app, app.Config().DisableHeaderNormalizing}
	a.last.Store(last)
	return last.fold
}

// requestHeader is the Engine's view of fasthttp's request headers. It
// returns copies: the Engine keeps the key and the scope past the request.
type requestHeader struct{ h *fasthttp.RequestHeader }

func (h requestHeader) Get(name string) string { return string(h.h.Peek(name)) }

func (h requestHeader) Values(name string) []string { return copyAll(h.h.PeekAll(name)) }

// presentHeader is for core.Engine.Keyed only, which only asks whether
// Values is nil: it says whether a header is there without copying its
// values as requestHeader does (a request with a key would otherwise copy it
// twice, once more in Begin). Its Values is not the header's values.
type presentHeader struct{ h *fasthttp.RequestHeader }

var present = []string{""}

func (h presentHeader) Get(name string) string { return string(h.h.Peek(name)) }

func (h presentHeader) Values(name string) []string {
	if len(h.h.PeekAll(name)) == 0 {
		return nil
	}
	return present
}

// foldedHeader is requestHeader for an app that disables header
// normalizing: it compares names ignoring case (see appCache.foldsHeaders).
// It serves Engine.Keyed too, copying a key once more: such apps are rare.
type foldedHeader struct{ h *fasthttp.RequestHeader }

func (h foldedHeader) Get(name string) string {
	if all := h.peekAll(name); len(all) > 0 {
		return string(all[0])
	}
	return ""
}

func (h foldedHeader) Values(name string) []string { return copyAll(h.peekAll(name)) }

func (h foldedHeader) peekAll(name string) [][]byte {
	var all [][]byte
	h.h.VisitAll(func(k, v []byte) {
		if len(k) == len(name) && strings.EqualFold(string(k), name) {
			all = append(all, v)
		}
	})
	return all
}

// copyAll copies header values out of fasthttp's buffers; nil if none.
func copyAll(all [][]byte) []string {
	if len(all) == 0 {
		return nil
	}
	vs := make([]string, len(all))
	for i, v := range all {
		vs[i] = string(v)
	}
	return vs
}

// responseHeader copies the response headers into an http.Header with
// canonical keys, as the Engine stores them.
func responseHeader(rh *fasthttp.ResponseHeader) http.Header {
	h := make(http.Header, rh.Len()+2)
	rh.VisitAll(func(k, v []byte) {
		key := http.CanonicalHeaderKey(string(k))
		h[key] = append(h[key], string(v))
	})
	return h
}

// presetHeader copies the response headers that middleware before this one
// set (CORS, request ids), so that they are not stored: nil if there are
// none but fasthttp's default Content-Type.
func presetHeader(rh *fasthttp.ResponseHeader) http.Header {
	var h http.Header
	rh.VisitAll(func(k, v []byte) {
		if string(k) == fiber.HeaderContentType {
			return
		}
		if h == nil {
			h = make(http.Header)
		}
		key := http.CanonicalHeaderKey(string(k))
		h[key] = append(h[key], string(v))
	})
	return h
}

// writeResponse writes an Engine response (a replay or a problem) the
// Fiber way. The body is copied into fasthttp's buffer, not aliased: it may
// be the store's own bytes.
func writeResponse(c *fiber.Ctx, r *core.Response) {
	res := c.Response()
	res.SetStatusCode(r.StatusCode)
	for k, vs := range r.Header {
		for i, v := range vs {
			if i == 0 {
				res.Header.Set(k, v)
			} else {
				res.Header.Add(k, v)
			}
		}
	}
	res.SetBody(r.Body)
}

// localsContext is the request's user context (c.UserContext()) whose
// Value reads c.Locals first, as ginidem and echoidem read the framework's
// own store first, so that a core.Config.Scope function can read what an
// authentication middleware stored with c.Locals.
type localsContext struct {
	context.Context
	c *fiber.Ctx
}

func (l localsContext) Value(key any) any {
	if v := l.c.Locals(key); v != nil {
		return v
	}
	return l.Context.Value(key)
}
