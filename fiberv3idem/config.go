package fiberv3idem

import (
	"github.com/gofiber/fiber/v3"

	"github.com/idem-go/idem/core"
)

// Config defines the config for the middleware. Every idempotency setting
// (Required, Methods, Scope, TTLs, Wait, FailClosed, Observer…) lives in the
// core.Config the Engine was built from; Config holds only Fiber things.
type Config struct {
	// Next defines a function to skip this middleware when returned true:
	// the request goes on untouched.
	//
	// Optional. Default: nil (the Engine's Methods decide).
	Next func(c fiber.Ctx) bool

	// Engine decides, for each request, whether to run the handler, replay
	// a stored response or refuse. Build it once with core.New and share it.
	//
	// Optional. Default: core.New(core.Config{}), built once per call of
	// New: an in-memory store for one instance and no Scope, for try-outs.
	Engine *core.Engine

	// ErrorHandler renders the Engine's refusals (400, 409, 413, 422, 500,
	// 503; docs/problems.md) with their other headers, such as Retry-After,
	// already set; the error it returns goes to the app's ErrorHandler. To
	// have the app render them its own way:
	//
	//	ErrorHandler: func(c fiber.Ctx, p *core.Problem) error {
	//		return fiber.NewError(p.Status, p.Title)
	//	},
	//
	// Optional. Default: nil, the problem is sent as the Engine built it,
	// application/problem+json (RFC 9457).
	ErrorHandler func(c fiber.Ctx, p *core.Problem) error
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
		if err != nil { // a zero core.Config takes only defaults, which are valid
			panic("fiberv3idem: default engine: " + err.Error())
		}
		cfg.Engine = eng
	}
	return cfg
}
