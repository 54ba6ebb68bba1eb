package fiberidem

import (
	"github.com/gofiber/fiber/v2"

	"github.com/idem-go/idem/core"
)

// Config defines the config for the middleware. Every idempotency setting
// (Required, Methods, Scope, TTLs, Wait, FailClosed, Observer…) lives in the
// core.Config the Engine was built from; Config holds only Fiber things.
type Config struct {
	// Next defines a function to skip this middleware when returned true:
	// the request goes on to the next handler untouched.
	//
	// Optional. Default: nil (the Engine's Methods decide which requests
	// are covered).
	Next func(c *fiber.Ctx) bool

	// Engine decides, for each request, whether to run the handler, replay
	// a stored response or refuse. Build it once with core.New and share it
	// between the routes that need it.
	//
	// Optional. Default: an Engine with core's defaults on an in-memory
	// store (core.New(core.Config{})), built once per call of New. It
	// protects one instance only and has no Scope: build your own Engine
	// for anything but a try-out.
	Engine *core.Engine

	// ErrorHandler renders the Engine's refusals (400 bad or missing key or
	// unreadable body, 409 key in flight, 413, 422 key reused, 500 body read
	// before the middleware, 503 store down). The response's other headers,
	// such as Retry-After, are already set when it is called; the error it
	// returns goes to the app's ErrorHandler, as a handler's would. To have
	// the app render them in its own format:
	//
	//	ErrorHandler: func(c *fiber.Ctx, p *core.Problem) error {
	//		return fiber.NewError(p.Status, p.Title)
	//	},
	//
	// Optional. Default: nil, the problem is written as the Engine built it,
	// an application/problem+json (RFC 9457) document.
	ErrorHandler func(c *fiber.Ctx, p *core.Problem) error
}

// ConfigDefault is the default config.
var ConfigDefault = Config{
	Next:   nil,
	Engine: nil, // built in configDefault, so that nothing is allocated here
}

// configDefault returns config[0] (or ConfigDefault) with its zero fields
// set to their defaults.
func configDefault(config ...Config) Config {
	cfg := ConfigDefault
	if len(config) > 0 {
		cfg = config[0]
	}
	if cfg.Engine == nil {
		eng, err := core.New(core.Config{})
		if err != nil {
			// A zero core.Config takes only defaults, which are valid.
			panic("fiberidem: default engine: " + err.Error())
		}
		cfg.Engine = eng
	}
	return cfg
}
