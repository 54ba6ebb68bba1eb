package echoidem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/echoidem"
)

// A POST sent twice with the same Idempotency-Key: the handler runs once,
// and the retry gets the stored response back.
func Example() {
	eng, err := core.New(core.Config{}) // the memory store; redislock for many instances
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.Use(middleware.Recover()) // then the authentication middleware
	orders := 0
	// idem on the routes it protects only (README, "Use"): under e.Use, a
	// login route's 401 would be stored under the client's key and replayed.
	e.POST("/orders", func(c echo.Context) error {
		orders++
		return c.JSON(http.StatusCreated, map[string]int{"id": orders})
	}, echoidem.New(eng))

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "order-7f3a")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Printf("%d replay=%q %s", rec.Code, rec.Header().Get("X-Idempotency-Replay"), rec.Body)
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 replay="" {"id":1}
	// 201 replay="true" {"id":1}
	// orders created: 1
}

// The Engine's refusals rendered by the app's HTTPErrorHandler instead of
// as problem+json documents.
func ExampleNewWithConfig() {
	eng, err := core.New(core.Config{Required: true})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.Use(echoidem.NewWithConfig(echoidem.Config{
		Engine:  eng,
		Skipper: func(c echo.Context) bool { return c.Path() == "/webhooks" },
		ErrorHandler: func(c echo.Context, p *core.Problem) error {
			return echo.NewHTTPError(p.Status, p.Title).SetInternal(p)
		},
	}))
	e.POST("/orders", func(c echo.Context) error { return c.NoContent(http.StatusCreated) })

	req := httptest.NewRequest(http.MethodPost, "/orders", nil) // no key
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	fmt.Printf("%d %s", rec.Code, rec.Body)
	// Output:
	// 400 {"message":"Missing idempotency key"}
}
