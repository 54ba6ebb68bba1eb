// Command provider is the fake payment provider of examples/payments: a
// separate process with no idempotency of its own, so that a test can count
// what the payments server really charged. Every POST /charges is one charge,
// recorded with the Idempotency-Key header it came with (the key a real
// provider would deduplicate on); GET /charges lists them.
//
//	POST /charges {"payment": "K", "amount": 500}  → 201 {"id": "ch_1", "payment": "K", "amount": 500}
//	GET  /charges                                  → 200 {"count": 1, "charges": [{"payment": "K", "amount": 500, "idempotency_key": "…"}]}
//
// It listens on $ADDR (default 127.0.0.1:8091) and keeps its charges in
// memory.
package main

import (
	"context"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Charge is one charge, as GET /charges lists it.
type Charge struct {
	ID             string `json:"id"`
	Payment        string `json:"payment"`
	Amount         int64  `json:"amount"`
	IdempotencyKey string `json:"idempotency_key"`
}

type provider struct {
	mu      sync.Mutex
	charges []Charge
}

func (p *provider) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Payment string `json:"payment"`
		Amount  int64  `json:"amount"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || req.Payment == "" || req.Amount <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"payment\": non-empty, \"amount\": positive}"})
		return
	}
	p.mu.Lock()
	c := Charge{ID: "ch_" + strconv.Itoa(len(p.charges)+1), Payment: req.Payment, Amount: req.Amount, IdempotencyKey: r.Header.Get("Idempotency-Key")}
	p.charges = append(p.charges, c)
	p.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"id": c.ID, "payment": c.Payment, "amount": c.Amount})
}

func (p *provider) list(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	charges := append([]Charge{}, p.charges...)
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"count": len(charges), "charges": charges})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck
}

func main() {
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8091"
	}
	p := &provider{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", p.create)
	mux.HandleFunc("GET /charges", p.list)
	srv := &http.Server{Handler: mux, ReadTimeout: 30 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("provider listening on %s", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(shutdown) //nolint:errcheck
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
