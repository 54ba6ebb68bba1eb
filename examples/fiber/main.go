// Command fiber is the order API of the examples on Fiber v2, protected by
// idem's Fiber middleware (fiberidem).
//
//	@title			idem example: orders (Fiber)
//	@version		1.0
//	@description	A small order API whose POST /orders is protected by idem: send an Idempotency-Key and retry safely.
//	@BasePath		/
package main

import (
	"errors"
	"log"
	"log/slog"
	"os"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/cors"
	"github.com/gofiber/fiber/v2/middleware/recover"
	fiberSwagger "github.com/gofiber/swagger"

	"github.com/idem-go/idem/examples/fiber/docs"
	"github.com/idem-go/idem/examples/internal/exampleapp"
	"github.com/idem-go/idem/examples/internal/orders"
	"github.com/idem-go/idem/fiberidem"
)

func main() {
	app, err := exampleapp.Setup()
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()

	h := &handlers{svc: app.Orders, log: app.Logger}
	f := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		ReadTimeout:           exampleapp.ReadTimeout,
		// Routes as in the other examples: /ORDERS and /orders/ are not
		// /orders (Fiber matches them by default).
		CaseSensitive: true,
		StrictRouting: true,
		// Handlers return errors; this renders them as {"error": …}. For a
		// request with a key, fiberidem calls it itself, so that a 400 is
		// stored and replayed like any 4xx, and a 500 is not stored.
		ErrorHandler: h.renderError,
		// FIBER_STREAM_BODY=1: request bodies are streamed to the handler
		// (fiberidem reads a keyed one, bounded by MaxBodyBytes).
		StreamRequestBody: os.Getenv("FIBER_STREAM_BODY") == "1",
	})
	// fasthttp's 400 for a request it cannot parse (a control byte in a
	// header) reaches renderError with the raw request in its message,
	// headers a proxy added included: not with this set.
	f.Server().SecureErrorLogMessage = true
	if c := app.CORS; c.Origin != "" { // CORS_ORIGIN: before idem, which leaves preflights (OPTIONS) alone
		f.Use(cors.New(cors.Config{AllowOrigins: c.Origin, AllowMethods: strings.Join(c.Methods, ","),
			AllowHeaders: strings.Join(c.AllowHeaders, ","), ExposeHeaders: strings.Join(c.ExposeHeaders, ","), MaxAge: c.MaxAge}))
	}
	// recover.New() outside idem: a panic releases the key's lock, nothing
	// is stored, and the client's retry runs the handler again.
	f.Use(recover.New())
	// The middleware is mounted on the route, where c.Route().Path is the
	// route template, for the Engine's events (under app.Use, Fiber v2 has
	// not routed the request yet: the route is reported as "unmatched").
	idem := fiberidem.Config{Engine: app.Engine}
	f.Post("/orders", fiberidem.New(idem), h.create)
	f.Get("/orders", h.list)
	f.Get("/swagger/*", fiberSwagger.HandlerDefault) // UI, and the spec at /swagger/doc.json
	f.Get("/metrics", adaptor.HTTPHandler(app.Ops))
	f.All("/admin/idempotency/*", adaptor.HTTPHandler(app.Ops))

	// Once every route is registered: the served spec documents the header
	// on the routes fiberidem covers, read from Fiber's route table (every
	// route but those of f.Use; each POST, PUT, PATCH and DELETE route here
	// is mounted with fiberidem).
	if err := app.Document(docs.SwaggerInfo, fiberidem.Operations(idem, f.GetRoutes(true))); err != nil {
		log.Fatal(err)
	}

	if err := app.Serve("fiber", f.Listener, f.ShutdownWithContext); err != nil {
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
func (h *handlers) create(c *fiber.Ctx) error {
	body, err := orders.ReadFastBody(c.Request())
	if err != nil {
		return fiber.NewError(orders.BodyStatus(err), err.Error())
	}
	req, err := orders.Decode(body)
	if err != nil {
		return fiber.NewError(fiber.StatusBadRequest, err.Error())
	}
	o, err := h.svc.Create(c.UserContext(), req)
	if err != nil {
		return err // 500
	}
	c.Location("/orders/" + o.ID)
	return c.Status(fiber.StatusCreated).JSON(o)
}

// list godoc
//
//	@Summary	List the orders really created
//	@Tags		orders
//	@Produce	json
//	@Success	200	{object}	orders.List
//	@Router		/orders [get]
func (h *handlers) list(c *fiber.Ctx) error {
	l, err := h.svc.List(c.UserContext())
	if err != nil {
		return err
	}
	return c.JSON(l)
}

// renderError is the app's ErrorHandler: the status and message of a
// *fiber.Error as {"error": message}; any other error is a 500 whose text
// goes to the log only (orders.ServerError).
func (h *handlers) renderError(c *fiber.Ctx, err error) error {
	if fe := (*fiber.Error)(nil); errors.As(err, &fe) {
		return c.Status(fe.Code).JSON(orders.Error{Error: fe.Message})
	}
	return c.Status(fiber.StatusInternalServerError).JSON(orders.Error{Error: orders.ServerError(h.log, err)})
}
