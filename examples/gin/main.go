// Command gin is the order API of the examples on Gin, protected by idem's
// Gin middleware (ginidem).
//
//	@title			idem example: orders (Gin)
//	@version		1.0
//	@description	A small order API whose POST /orders is protected by idem: send an Idempotency-Key and retry safely.
//	@BasePath		/
package main

import (
	"log"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-contrib/cors"
	"github.com/gin-gonic/gin"
	swaggerFiles "github.com/swaggo/files"
	ginSwagger "github.com/swaggo/gin-swagger"

	"github.com/idem-go/idem/examples/gin/docs"
	"github.com/idem-go/idem/examples/internal/exampleapp"
	"github.com/idem-go/idem/examples/internal/orders"
	"github.com/idem-go/idem/ginidem"
)

func main() {
	app, err := exampleapp.Setup()
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()

	h := &handlers{svc: app.Orders, log: app.Logger}
	r := gin.New()
	// 405 for a method /orders does not serve, as in the other examples
	// (Gin answers 404 by default).
	r.HandleMethodNotAllowed = true
	// 404 for /orders/, as in the other examples: Gin redirects it to
	// /orders by default (307 for a POST), which a client follows with its
	// body and key, so /orders/ would create an order here only.
	r.RedirectTrailingSlash = false
	if c := app.CORS; c.Origin != "" { // CORS_ORIGIN: before idem, which leaves preflights (OPTIONS) alone
		r.Use(cors.New(cors.Config{AllowOrigins: []string{c.Origin}, AllowMethods: c.Methods, AllowHeaders: c.AllowHeaders,
			ExposeHeaders: c.ExposeHeaders, MaxAge: time.Duration(c.MaxAge) * time.Second}))
	}
	// Recovery outside idem: a panic releases the key's lock, nothing is
	// stored, and the client's retry runs the handler again.
	r.Use(gin.Recovery())
	// idem on the order routes only, a group: the admin handler, the
	// metrics and the spec never pass through it (under r.Use, the admin's
	// 401 would be stored under the client's key and replayed to the
	// admin with the token). GET is not covered by the Engine and passes
	// through; POST /orders is protected, its route template (c.FullPath())
	// in the Engine's events.
	api := r.Group("/orders", ginidem.New(app.Engine))
	api.POST("", h.create)
	api.GET("", h.list)
	r.GET("/swagger/*any", swaggerUI()) // the spec at /swagger/doc.json
	r.GET("/metrics", gin.WrapH(app.Ops))
	r.Any("/admin/idempotency/*any", gin.WrapH(app.Ops))

	// Once every route is registered: the served spec documents the header
	// on the routes ginidem covers, the group's, read from Gin's route table.
	var covered gin.RoutesInfo
	for _, rt := range r.Routes() {
		if rt.Path == api.BasePath() || strings.HasPrefix(rt.Path, api.BasePath()+"/") {
			covered = append(covered, rt)
		}
	}
	if err := app.Document(docs.SwaggerInfo, ginidem.Operations(app.Engine, covered)); err != nil {
		log.Fatal(err)
	}

	srv := &http.Server{Addr: app.Addr, Handler: r, ReadTimeout: exampleapp.ReadTimeout}
	if err := app.Serve("gin", srv.Serve, srv.Shutdown); err != nil {
		log.Fatal(err)
	}
}

// swaggerUI serves Swagger UI under /swagger/ and the spec at
// /swagger/doc.json (gin-swagger answers 404 to /swagger/ itself, which it
// does not know: redirect it to the UI, as net/http's and Echo's do).
func swaggerUI() gin.HandlerFunc {
	ui := ginSwagger.WrapHandler(swaggerFiles.Handler)
	return func(c *gin.Context) {
		if c.Param("any") == "/" {
			c.Redirect(http.StatusMovedPermanently, "/swagger/index.html")
			return
		}
		ui(c)
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
func (h *handlers) create(c *gin.Context) {
	// orders.Decode, as in the other examples: c.ShouldBindJSON decodes a
	// stream, and would take {"item":"book","qty":1}xyz for an order.
	body, err := orders.ReadBody(c.Request.Body)
	if err != nil {
		c.JSON(orders.BodyStatus(err), orders.Error{Error: err.Error()})
		return
	}
	req, err := orders.Decode(body)
	if err != nil {
		c.JSON(http.StatusBadRequest, orders.Error{Error: err.Error()})
		return
	}
	o, err := h.svc.Create(c.Request.Context(), req)
	if err != nil {
		c.JSON(http.StatusInternalServerError, orders.Error{Error: orders.ServerError(h.log, err)})
		return
	}
	c.Header("Location", "/orders/"+o.ID)
	c.JSON(http.StatusCreated, o)
}

// list godoc
//
//	@Summary	List the orders really created
//	@Tags		orders
//	@Produce	json
//	@Success	200	{object}	orders.List
//	@Router		/orders [get]
func (h *handlers) list(c *gin.Context) {
	l, err := h.svc.List(c.Request.Context())
	if err != nil {
		c.JSON(http.StatusInternalServerError, orders.Error{Error: orders.ServerError(h.log, err)})
		return
	}
	c.JSON(http.StatusOK, l)
}
