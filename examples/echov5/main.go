// Command echov5 is the order API of the examples on Echo v5, protected by
// idem's Echo v5 middleware (echov5idem).
//
//	@title			idem example: orders (Echo v5)
//	@version		1.0
//	@description	A small order API whose POST /orders is protected by idem: send an Idempotency-Key and retry safely.
//	@BasePath		/
package main

import (
	"errors"
	"log"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	httpSwagger "github.com/swaggo/http-swagger/v2"

	"github.com/idem-go/idem/echov5idem"
	"github.com/idem-go/idem/examples/echov5/docs"
	"github.com/idem-go/idem/examples/internal/exampleapp"
	"github.com/idem-go/idem/examples/internal/orders"
)

func main() {
	app, err := exampleapp.Setup()
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()

	h := &handlers{svc: app.Orders, log: app.Logger}
	e := echo.New()
	e.Logger = app.Logger
	// The handlers return errors; this renders them as {"error": ...}.
	// echov5idem calls it before storing, so a 400 is stored and replayed
	// as the client first saw it, and a 500 is not stored.
	e.HTTPErrorHandler = h.renderError
	if c := app.CORS; c.Origin != "" { // CORS_ORIGIN: before idem, which leaves preflights (OPTIONS) alone
		e.Use(middleware.CORSWithConfig(middleware.CORSConfig{AllowOrigins: []string{c.Origin}, AllowMethods: c.Methods,
			AllowHeaders: c.AllowHeaders, ExposeHeaders: c.ExposeHeaders, MaxAge: c.MaxAge}))
	}
	e.Use(middleware.Recover()) // outside idem: a panic releases the key's lock
	// idem on POST /orders only, per route: the admin handler, the metrics
	// and the spec never pass through it (under e.Use, the admin's 401 would
	// be stored under the client's key and replayed to the admin with the
	// token). Per route rather than on an e.Group, for which Echo adds
	// catch-all routes that run its middleware on paths no route serves.
	// After routing, so the middleware sees the route template (c.Path()).
	idem := echov5idem.Config{Engine: app.Engine}
	covered := echo.Routes{e.POST("/orders", h.create, echov5idem.NewWithConfig(idem))}
	e.GET("/orders", h.list)
	// Swagger UI, and the spec at /swagger/doc.json (the net/http handler:
	// echo-swagger is not published for v5 yet).
	e.GET("/swagger/*", echo.WrapHandler(httpSwagger.Handler(httpSwagger.URL("/swagger/doc.json"))))
	e.GET("/metrics", echo.WrapHandler(app.Ops))
	e.Any("/admin/idempotency/*", echo.WrapHandler(app.Ops))

	// The served spec documents the header on the routes echov5idem covers.
	if err := app.Document(docs.SwaggerInfo, echov5idem.Operations(idem, covered)); err != nil {
		log.Fatal(err)
	}

	srv := &http.Server{Handler: e, ReadTimeout: exampleapp.ReadTimeout}
	if err := app.Serve("echov5", srv.Serve, srv.Shutdown); err != nil {
		log.Fatal(err)
	}
}

type handlers struct {
	svc *orders.Service
	log *slog.Logger
}

// create godoc
//
//	@Summary	Create an order
//	@Tags		orders
//	@Accept		json
//	@Produce	json
//	@Param		X-User-ID	header		string					false	"user the request acts for"
//	@Param		order		body		orders.CreateRequest	true	"the order"
//	@Success	201			{object}	orders.Order
//	@Failure	400			{object}	orders.Error
//	@Failure	413			{object}	orders.Error
//	@Failure	500			{object}	orders.Error
//	@Router		/orders [post]
func (h *handlers) create(c *echo.Context) error {
	// orders.Decode, as in the other examples: JSON whatever the
	// Content-Type says, and all of it.
	body, err := orders.ReadBody(c.Request().Body)
	if err != nil {
		return echo.NewHTTPError(orders.BodyStatus(err), err.Error()).Wrap(err)
	}
	req, err := orders.Decode(body)
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, err.Error()).Wrap(err)
	}
	o, err := h.svc.Create(c.Request().Context(), req)
	if err != nil {
		return err // 500
	}
	c.Response().Header().Set(echo.HeaderLocation, "/orders/"+o.ID)
	return c.JSON(http.StatusCreated, o)
}

// list godoc
//
//	@Summary	List the orders really created
//	@Tags		orders
//	@Produce	json
//	@Success	200	{object}	orders.List
//	@Router		/orders [get]
func (h *handlers) list(c *echo.Context) error {
	l, err := h.svc.List(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

// renderError is the app's HTTPErrorHandler: an *echo.HTTPError keeps its
// status and message, any other error the status it carries (500 if none)
// with that status's text under 500 (Echo's 404 and 405), else a message
// whose error goes to the log only (orders.ServerError).
func (h *handlers) renderError(c *echo.Context, err error) {
	if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Committed {
		return
	}
	status := http.StatusInternalServerError
	if s := echo.StatusCode(err); s != 0 {
		status = s
	}
	var msg string
	if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
		msg = he.Message
	} else if status < http.StatusInternalServerError {
		// Echo's own client errors (its router's ErrNotFound and
		// ErrMethodNotAllowed) are no *echo.HTTPError in v5: the status's
		// text, as in Echo v4, and no failure of the order service to log.
		msg = http.StatusText(status)
	} else {
		msg = orders.ServerError(h.log, err)
	}
	if err := c.JSON(status, orders.Error{Error: msg}); err != nil {
		c.Logger().Error("rendering an error", "error", err)
	}
}
