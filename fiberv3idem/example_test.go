package fiberv3idem_test

import (
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/fiberv3idem"
)

func Example() {
	eng, err := core.New(core.Config{}) // the in-memory store; redislock for many instances
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	app.Use(recover.New()) // and the authentication middleware
	orders := 0
	app.Post("/orders", fiberv3idem.New(fiberv3idem.Config{Engine: eng}), func(c fiber.Ctx) error {
		orders++
		return c.Status(fiber.StatusCreated).JSON(fiber.Map{"id": orders})
	})

	for range 2 {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := app.Test(req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d X-Idempotency-Replay=%q\n", resp.StatusCode, resp.Header.Get("X-Idempotency-Replay"))
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 X-Idempotency-Replay=""
	// 201 X-Idempotency-Replay="true"
	// orders created: 1
}

// idem's refusals rendered by the app's ErrorHandler instead of as
// problem+json documents, and a Next that skips webhooks.
func ExampleNew_config() {
	eng, err := core.New(core.Config{Required: true})
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	idem := fiberv3idem.New(fiberv3idem.Config{
		Engine: eng,
		Next:   func(c fiber.Ctx) bool { return strings.HasPrefix(c.Path(), "/webhooks/") },
		ErrorHandler: func(c fiber.Ctx, p *core.Problem) error {
			return fiber.NewError(p.Status, p.Title)
		},
	})
	app.Post("/orders", idem, func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusCreated) })

	resp, err := app.Test(httptest.NewRequest("POST", "/orders", nil)) // no key
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s\n", resp.StatusCode, body)
	// Output:
	// 400 Missing idempotency key
}
