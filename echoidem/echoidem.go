package echoidem

import (
	"errors"
	"net/http"
	"reflect"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/httpadapt"
)

// Config configures the middleware. Idempotency itself (keys, scope, TTLs,
// store, wait mode...) is configured on the core.Engine; Config only holds
// what is Echo's.
type Config struct {
	// Skipper skips the middleware for a request: it runs unprotected.
	// Optional. Default: middleware.DefaultSkipper.
	Skipper middleware.Skipper

	// Engine decides what to do with each request. Required.
	Engine *core.Engine

	// ErrorHandler renders idem's refusals (see ExampleNewWithConfig); headers
	// such as Retry-After are already set, and its error goes up the chain.
	// Optional. Default: nil, an RFC 9457 application/problem+json document.
	ErrorHandler func(c echo.Context, p *core.Problem) error
}

// DefaultConfig is the default configuration, less the Engine, which has no
// default.
var DefaultConfig = Config{Skipper: middleware.DefaultSkipper}

// New returns the middleware on eng with the DefaultConfig. It panics if
// eng is nil, as NewWithConfig does.
func New(eng *core.Engine) echo.MiddlewareFunc {
	cfg := DefaultConfig
	cfg.Engine = eng
	return NewWithConfig(cfg)
}

// NewWithConfig returns the middleware for cfg; its nil fields take the
// values of DefaultConfig. It panics if cfg.Engine is nil.
func NewWithConfig(cfg Config) echo.MiddlewareFunc {
	if cfg.Engine == nil {
		panic("echoidem: Config.Engine is required")
	}
	if cfg.Skipper == nil {
		cfg.Skipper = DefaultConfig.Skipper
	}
	eng := cfg.Engine
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if cfg.Skipper(c) || !eng.Keyed(req.Method, req.Header) || routerAnswer(c) {
				return next(c)
			}
			res := c.Response()
			st := &httpadapt.Protected{BodyLimit: bodyLimit}
			f, resp := st.Begin(eng, req, c.Path(), routerHost(c), c, res)
			switch {
			case resp != nil && st.BodyLimitError() != nil:
				return st.BodyLimitError() // BodyLimit's 413, as Echo answers it without idem
			case resp != nil && resp.Problem != nil && cfg.ErrorHandler != nil:
				resp.SetHeaders(res.Header())
				return cfg.ErrorHandler(c, resp.Problem)
			case resp != nil:
				resp.Write(res) // a replay is not a handler result: next does not run
				return nil
			case f == nil:
				return next(c)
			}

			w := res.Writer
			res.Writer = f.ResponseWriter(w)
			c.SetRequest(f.Request(req)) // the body Begin read; core.InfoFromContext
			finished := false
			defer func() {
				res.Writer = w
				if !finished && f.Buffered() {
					// A panic: nothing was sent, whatever res says, so that
					// Recover's 500 goes out.
					res.Committed, res.Status, res.Size = false, http.StatusOK, 0
				}
				f.Abort() // after a panic; a no-op once Finish ran
			}()

			err := next(c)
			if err != nil {
				// Render the error now, through the app's HTTPErrorHandler,
				// so that what the client gets is what is stored.
				c.Error(err)
			}
			var answerErr error
			if unrouted(err) {
				f.Abandon() // sent, not stored: the key is released
			} else {
				f.Finish(func(failed *core.Response) {
					// A Buffered flight's failed commit: nothing of the
					// handler's was sent, whatever res says.
					res.Writer = w
					res.Committed, res.Status, res.Size = false, http.StatusOK, 0
					if cfg.ErrorHandler == nil {
						failed.Write(res)
						return
					}
					failed.SetHeaders(res.Header())
					answerErr = cfg.ErrorHandler(c, failed.Problem)
				})
			}
			finished = true
			return answerErr
		}
	}
}

// routerAnswer reports whether Echo's router found no route for c's request
// and picked echo.NotFoundHandler or echo.MethodNotAllowedHandler (read
// when called: an app may replace them). Such a request, under e.Use, passes
// through untouched, with the 404 or 405 a client would get without the
// middleware.
// A context not routed yet (e.Pre, e.NewContext) is routed again on a
// context of our own. Handlers are compared by reflection, which
// TestRouterAnswers guards (docs/design.md, "echoidem").
func routerAnswer(c echo.Context) bool {
	switch p := reflect.ValueOf(c.Handler()).Pointer(); p {
	case reflect.ValueOf(echo.MethodNotAllowedHandler).Pointer():
		return true // only the router sets it
	case reflect.ValueOf(echo.NotFoundHandler).Pointer():
		e, req := c.Echo(), c.Request()
		router := e.Router()
		if r, ok := e.Routers()[req.Host]; ok { // as Echo picks a host's router
			router = r
		}
		// A new context, not a pooled one: a pooled context's parameter
		// slice is sized by the routes there were when it was made.
		probe := e.NewContext(req, nil)
		router.Find(req.Method, echo.GetPath(req), probe)
		return reflect.ValueOf(probe.Handler()).Pointer() == p
	}
	return false
}

// routerHost returns the request's host if Echo routed it on that host's
// router (e.Host), else "": one path of two hosts may go to two handlers.
func routerHost(c echo.Context) string {
	host := c.Request().Host
	if _, ok := c.Echo().Routers()[host]; ok {
		return host
	}
	return ""
}

// unrouted reports whether err is what Echo's router answers when no route
// matches (echo.ErrNotFound, echo.ErrMethodNotAllowed), for the requests
// that routerAnswer cannot tell beforehand: those that reach a group's
// catch-all route, whose handler the group's middleware wraps. Such a
// response is sent but not stored, as with the other adapters, so that a
// key sent to a wrong URL stays free for the right one. A handler that
// returns one of these errors itself is treated the same way: its 404 or
// 405 is not stored, and a retry runs it again.
func unrouted(err error) bool {
	return errors.Is(err, echo.ErrNotFound) || errors.Is(err, echo.ErrMethodNotAllowed)
}

// bodyLimit reports whether err is the 413 of Echo's BodyLimit middleware.
func bodyLimit(err error) bool {
	var he *echo.HTTPError
	return errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge
}
