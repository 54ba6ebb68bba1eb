// Command nethttp is the order API of the examples on net/http's ServeMux,
// protected by idem's net/http middleware.
//
//	@title			idem example: orders (net/http)
//	@version		1.0
//	@description	A small order API whose POST /orders is protected by idem: send an Idempotency-Key and retry safely.
//	@BasePath		/
package main

import (
	"encoding/json"
	"log"
	"log/slog"
	"net/http"

	httpSwagger "github.com/swaggo/http-swagger/v2"

	"github.com/idem-go/idem/examples/internal/exampleapp"
	"github.com/idem-go/idem/examples/internal/orders"
	"github.com/idem-go/idem/examples/nethttp/docs"
	"github.com/idem-go/idem/swagger"
)

func main() {
	app, err := exampleapp.Setup()
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()

	h := &handlers{svc: app.Orders, log: app.Logger}
	mux := http.NewServeMux()
	// The middleware sits inside the mux, per route, so that it sees the
	// route template (r.Pattern).
	mux.Handle("POST /orders", app.Engine.Middleware(http.HandlerFunc(h.create)))
	mux.HandleFunc("GET /orders", h.list)

	// The served spec documents the header on the routes the middleware
	// covers; net/http has no route table to read, so they are listed.
	if err := app.Document(docs.SwaggerInfo, []swagger.Operation{{Method: http.MethodPost, Path: "/orders"}}); err != nil {
		log.Fatal(err)
	}
	mux.Handle("GET /swagger/", httpSwagger.Handler(httpSwagger.URL("/swagger/doc.json")))
	mux.Handle("GET /metrics", app.Ops)
	mux.Handle("/admin/idempotency/", app.Ops)

	// CORS_ORIGIN: CORS around the mux, so that it answers preflights
	// (OPTIONS, which idem does not cover) before the mux routes them.
	srv := &http.Server{Addr: app.Addr, Handler: app.CORS.Handler(mux), ReadTimeout: exampleapp.ReadTimeout}
	if err := app.Serve("net/http", srv.Serve, srv.Shutdown); err != nil {
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
func (h *handlers) create(w http.ResponseWriter, r *http.Request) {
	body, err := orders.ReadBody(r.Body)
	if err != nil {
		writeJSON(w, orders.BodyStatus(err), orders.Error{Error: err.Error()})
		return
	}
	req, err := orders.Decode(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, orders.Error{Error: err.Error()})
		return
	}
	o, err := h.svc.Create(r.Context(), req)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, orders.Error{Error: orders.ServerError(h.log, err)})
		return
	}
	w.Header().Set("Location", "/orders/"+o.ID)
	writeJSON(w, http.StatusCreated, o)
}

// list godoc
//
//	@Summary	List the orders really created
//	@Tags		orders
//	@Produce	json
//	@Success	200	{object}	orders.List
//	@Router		/orders [get]
func (h *handlers) list(w http.ResponseWriter, r *http.Request) {
	l, err := h.svc.List(r.Context())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, orders.Error{Error: orders.ServerError(h.log, err)})
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck
}
