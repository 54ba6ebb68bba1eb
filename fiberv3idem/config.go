package fiberv3idem

import (
	"github.com/gofiber/fiber/v3"

	"github.com/idem-go/idem/core"
)

// Config defines the config for the middleware. Every idempotency setting
// (Required, Methods, Scope, TTLs, Wait, FailClosed, Observer…) lives in the
// core.Config the Engine was built from; Config holds only Fiber things.
type Config struct {
	// Next defines a function to skip this middleware when returned true.
	//
	// Optional. Default: nil
	Next func(c fiber.Ctx) bool

	// Engine decides, for each request, whether to run the handler, replay
	// a stored response or refuse; build it once with core.New.
	//
	// Required.
	Engine *core.Engine

	// ErrorHandler renders idem's refusals, e.g. as fiber.NewError(p.Status,
	// p.Title); headers such as Retry-After are already set, and its error
	// goes to the app's ErrorHandler.
	//
	// Optional. Default: nil, an RFC 9457 application/problem+json document.
	ErrorHandler func(c fiber.Ctx, p *core.Problem) error
}

// ConfigDefault is the default config.
var ConfigDefault = Config{
	Next: nil,
}

// configDefault returns config[0], or ConfigDefault; it panics without an
// Engine.
func configDefault(config ...Config) Config {
	cfg := ConfigDefault
	if len(config) > 0 {
		cfg = config[0]
	}
	if cfg.Engine == nil {
		panic("fiberv3idem: Config.Engine is required")
	}
	return cfg
}
