package fiberidem_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/fiberidem"
)

func Example() {
	eng, err := core.New(core.Config{}) // the in-memory store
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	app.Use(recover.New()) // and the authentication middleware
	orders := 0
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: eng}), func(c *fiber.Ctx) error {
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
