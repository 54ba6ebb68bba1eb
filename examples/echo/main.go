// Command echo is the order API of the examples on Echo v4, protected by
// idem's Echo middleware (echoidem).
//
//	@title			idem example: orders (Echo)
//	@version		1.0
//	@description	A small order API whose POST /orders is protected by idem: send an Idempotency-Key and retry safely.
//	@BasePath		/
package main

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	echoSwagger "github.com/swaggo/echo-swagger"

	"github.com/idem-go/idem/echoidem"
	"github.com/idem-go/idem/examples/echo/docs"
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
	e.HideBanner, e.HidePort = true, true
	// The handlers return errors; this renders them as {"error": ...}.
	// echoidem calls it before storing, so a 400 is stored and replayed as
	// the client first saw it, and a 500 is not stored.
	e.HTTPErrorHandler = h.renderError
	e.Server.ReadTimeout = exampleapp.ReadTimeout
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
	idem := echoidem.Config{Engine: app.Engine}
	covered := []*echo.Route{e.POST("/orders", h.create, echoidem.NewWithConfig(idem))}
	e.GET("/orders", h.list)
	e.GET("/swagger/*", echoSwagger.WrapHandler) // UI, and the spec at /swagger/doc.json
	e.GET("/metrics", echo.WrapHandler(app.Ops))
	e.Any("/admin/idempotency/*", echo.WrapHandler(app.Ops))

	// The served spec documents the header on the routes echoidem covers.
	if err := app.Document(docs.SwaggerInfo, echoidem.Operations(idem, covered)); err != nil {
		log.Fatal(err)
	}

	if err := app.Serve("echo", func(ln net.Listener) error { e.Listener = ln; return e.Start("") }, e.Shutdown); err != nil {
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
func (h *handlers) create(c echo.Context) error {
	// orders.Decode, as in the other examples: JSON whatever the
	// Content-Type says (c.Bind would pick a binder by Content-Type), and
	// all of it (Echo's JSONSerializer decodes a stream, and would take
	// {"item":"book","qty":1}xyz for an order).
	body, err := orders.ReadBody(c.Request().Body)
	if err != nil {
		return echo.NewHTTPError(orders.BodyStatus(err), err.Error()).SetInternal(err)
	}
	req, err := orders.Decode(body)
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, err.Error()).SetInternal(err)
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
func (h *handlers) list(c echo.Context) error {
	l, err := h.svc.List(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

// renderError is the app's HTTPErrorHandler: an *echo.HTTPError keeps its
// status and message, any other error is a 500 whose text goes to the log
// only (orders.ServerError).
func (h *handlers) renderError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var status int
	var msg string
	if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
		status, msg = he.Code, fmt.Sprint(he.Message)
	} else {
		status, msg = http.StatusInternalServerError, orders.ServerError(h.log, err)
	}
	if err := c.JSON(status, orders.Error{Error: msg}); err != nil {
		c.Logger().Error(err)
	}
}
