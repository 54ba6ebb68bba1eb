package echov5idem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/echov5idem"
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
	e.POST("/orders", func(c *echo.Context) error {
		orders++
		return c.JSON(http.StatusCreated, map[string]int{"id": orders})
	}, echov5idem.New(eng))

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

// The Engine's refusals rendered by the app's HTTPErrorHandler, here Echo
// v5's RFC 9457 one, and a Skipper; ToMiddleware returns an error for an
// invalid Config instead of panicking.
func ExampleConfig_ToMiddleware() {
	eng, err := core.New(core.Config{Required: true})
	if err != nil {
		panic(err)
	}
	mw, err := echov5idem.Config{
		Engine:  eng,
		Skipper: func(c *echo.Context) bool { return c.Path() == "/webhooks" },
		ErrorHandler: func(c *echo.Context, p *core.Problem) error {
			return &echo.ProblemError{Type: p.Type, Title: p.Title, Status: p.Status, Detail: p.Detail}
		},
	}.ToMiddleware()
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler(false)
	e.Use(mw)
	e.POST("/orders", func(c *echo.Context) error { return c.NoContent(http.StatusCreated) })

	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders", nil)) // no key
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output:
	// 400 application/problem+json
}
