package echov5idem

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/httpadapt"
)

// Config configures the middleware. Idempotency itself (keys, scope, TTLs,
// store, wait mode…) is configured on the core.Engine; Config only holds
// what is Echo's.
type Config struct {
	// Skipper skips the middleware for a request: it runs unprotected.
	// Optional. Default: middleware.DefaultSkipper.
	Skipper middleware.Skipper

	// Engine decides what to do with each request. Required.
	Engine *core.Engine

	// ErrorHandler renders idem's refusals (see ExampleConfig_ToMiddleware); headers
	// such as Retry-After are already set, and its error goes up the chain.
	// Optional. Default: nil, an RFC 9457 application/problem+json document.
	ErrorHandler func(c *echo.Context, p *core.Problem) error
}

// DefaultConfig is the default configuration, less the Engine, which has no
// default.
var DefaultConfig = Config{Skipper: middleware.DefaultSkipper}

// ErrNoEngine is the error of a Config without an Engine.
var ErrNoEngine = errors.New("echov5idem: Config.Engine is required")

// New returns the middleware on eng with the DefaultConfig. It panics if
// eng is nil, as NewWithConfig does.
func New(eng *core.Engine) echo.MiddlewareFunc {
	cfg := DefaultConfig
	cfg.Engine = eng
	return NewWithConfig(cfg)
}

// NewWithConfig returns the middleware for cfg. It panics on an invalid
// Config; cfg.ToMiddleware returns the error instead.
func NewWithConfig(cfg Config) echo.MiddlewareFunc {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// ToMiddleware returns the middleware for cfg (echo.MiddlewareConfigurator),
// or ErrNoEngine. Its nil fields take the values of DefaultConfig.
func (cfg Config) ToMiddleware() (echo.MiddlewareFunc, error) {
	if cfg.Engine == nil {
		return nil, ErrNoEngine
	}
	if cfg.Skipper == nil {
		cfg.Skipper = DefaultConfig.Skipper
	}
	eng := cfg.Engine
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			req := c.Request()
			if cfg.Skipper(c) || !eng.Keyed(req.Method, req.Header) {
				return next(c)
			}
			route, routed := routeOf(c)
			if !routed {
				return next(c) // the router's 404 or 405: the key stays free for the right URL
			}
			w := c.Response()
			st := &httpadapt.Protected{BodyLimit: bodyLimit}
			f, resp := st.Begin(eng, req, route, "", c, w)
			switch {
			case resp != nil && st.BodyLimitError() != nil:
				return st.BodyLimitError() // BodyLimit's 413, as Echo answers it without idem
			case resp != nil && resp.Problem != nil && cfg.ErrorHandler != nil:
				resp.SetHeaders(w.Header())
				return cfg.ErrorHandler(c, resp.Problem)
			case resp != nil:
				resp.Write(w) // a replay or a refusal: next does not run
				return nil
			case f == nil:
				return next(c)
			}
			// An echo.Response of its own, as echo.WrapMiddleware gives: a
			// Buffered flight holds the response back from w, and the
			// HTTPErrorHandler must still see it as committed.
			c.SetResponse(echo.NewResponse(f.ResponseWriter(w), logger(c)))
			c.SetRequest(f.Request(req)) // the body Begin read; core.InfoFromContext
			defer func() {
				c.SetResponse(w)
				f.Abort() // after a panic; a no-op once Finish ran
			}()
			err := next(c)
			if err != nil {
				// Rendered now, by the app's HTTPErrorHandler, so that what
				// the client gets is what is stored.
				renderError(c, err)
			}
			if unrouted(err) {
				f.Abandon() // sent, not stored: the key is released
				return nil
			}
			var answer func(*core.Response) // a Buffered flight's failed commit: problem+json
			var answerErr error
			if cfg.ErrorHandler != nil {
				answer = func(failed *core.Response) {
					c.SetResponse(w)
					failed.SetHeaders(w.Header())
					answerErr = cfg.ErrorHandler(c, failed.Problem)
				}
			}
			f.Finish(answer)
			return answerErr
		}
	}, nil
}

// logger is c's logger; slog's default for a context from echo.NewContext,
// which has no Echo.
func logger(c *echo.Context) *slog.Logger {
	if c.Echo() == nil {
		return slog.Default()
	}
	return c.Logger()
}

func renderError(c *echo.Context, err error) {
	if e := c.Echo(); e != nil && e.HTTPErrorHandler != nil {
		e.HTTPErrorHandler(c, err)
		return
	}
	echo.DefaultHTTPErrorHandler(false)(c, err) // a context from echo.NewContext has no Echo
}

// routeOf returns the route template of c's request, and false if Echo's
// router matched no route: its own 404 or 405 (a RouteInfo with a name but
// no method), or a RouteNotFound route (a group's catch-all,
// e.RouteNotFound), which pass through untouched. A context not routed yet
// (under e.Pre, or from NewContext in a test; no RouteInfo at all) is
// routed on a context of its own to tell.
func routeOf(c *echo.Context) (string, bool) {
	ri := c.RouteInfo()
	if ri.Method == "" && ri.Name == "" {
		e := c.Echo()
		if e == nil {
			return c.Path(), true // cannot tell: protected
		}
		probe := e.NewContext(c.Request(), nil)
		e.Router().Route(probe)
		ri, c = probe.RouteInfo(), probe
	}
	return c.Path(), ri.Method != "" && ri.Method != echo.RouteNotFound
}

// unrouted reports whether a handler returned Echo's own not-found errors
// (echo.ErrNotFound, echo.ErrMethodNotAllowed): sent, not stored, so that a
// retry runs again.
func unrouted(err error) bool {
	return errors.Is(err, echo.ErrNotFound) || errors.Is(err, echo.ErrMethodNotAllowed)
}

// bodyLimit reports whether err is the 413 of Echo's BodyLimit middleware.
func bodyLimit(err error) bool {
	var sc echo.HTTPStatusCoder
	return errors.As(err, &sc) && sc.StatusCode() == http.StatusRequestEntityTooLarge
}
