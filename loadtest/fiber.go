package main

import (
	"encoding/json"
	"errors"
	"net"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/fiberidem"
)

// fiberServer serves, on a loopback port of this process, the handler of
// the net/http server as a Fiber v2 handler three ways:
//
//	POST /bare            without a middleware: the Fiber phases' baseline
//	POST /orders          behind fiberidem on eng (the memory store)
//	POST /orders-builtin  behind Fiber's own middleware/idempotency on its
//	                      memory storage and lock
//
// It returns the server's base URL and a function that stops it.
func fiberServer(eng *core.Engine, lifetime time.Duration) (string, func(), error) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	handler := func(c *fiber.Ctx) error {
		var o order
		if err := json.Unmarshal(c.Body(), &o); err != nil {
			return fiber.NewError(fiber.StatusBadRequest, err.Error())
		}
		o.ID, o.Amount, o.Currency, o.Status = "ord_2J8Hq3kVx9", 4200, "EUR", "created"
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		c.Status(fiber.StatusCreated)
		return json.NewEncoder(c).Encode(o)
	}
	app.Post("/bare", handler)
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: eng}), handler)
	app.Post("/orders-builtin", idempotency.New(idempotency.Config{
		KeyHeader: "Idempotency-Key",
		Lifetime:  lifetime,
		// Its default insists on 36 characters (a UUID); the load test's
		// keys are shorter. idem checks only that a key is printable ASCII
		// of at most 255 characters.
		KeyHeaderValidate: func(k string) error {
			if k == "" || len(k) > 255 {
				return errors.New("bad key")
			}
			return nil
		},
	}), handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go app.Listener(ln) //nolint:errcheck // ends with Shutdown
	return "http://" + ln.Addr().String(), func() { app.Shutdown() }, nil
}
