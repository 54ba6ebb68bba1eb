// Command payments is the example of a handler that survives crashes: POST
// /payments charges a payment provider (examples/payments/provider) and
// records the payment in two steps (core.Step), each checkpointed under the
// request's Idempotency-Key, and sends the provider a key derived from its
// own (core.DerivedKey, through idemclient). A retry after a crash skips the
// steps that finished, and a step run again sends the provider the same key.
//
//	POST /payments {"amount": 500, "account": "a1", "fail_after": ""}  → 201 {"id", "amount", "account", "charge_id"}
//	GET  /payments                                                     → 200 {"count": N, "payments": [{"key", "id", "amount", "account", "charge_id"}]}
//
// POST /payments needs an Idempotency-Key; keys are scoped per X-User-ID.
// fail_after "charge" or "record" makes the process exit (status 3, a
// crash) right after that step ran in it, once no other request is in its
// charge step: a retry, served the step's checkpoint, goes on. The environment is the other examples' (ADDR,
// REDIS_URL, DATABASE_URL, ...), plus PROVIDER_URL (default
// http://127.0.0.1:8091). Like every example it fails open by default; a
// payment API in production runs fail-closed, here IDEM_FAIL_CLOSED=1
// (README, "When the store fails").
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/examples/internal/exampleapp"
	"github.com/idem-go/idem/idemclient"
)

func main() {
	app, err := exampleapp.Setup()
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	store, err := newPayments(ctx, app.Redis(), app.Postgres())
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	providerURL := os.Getenv("PROVIDER_URL")
	if providerURL == "" {
		providerURL = "http://127.0.0.1:8091"
	}
	s := &server{eng: app.Engine, log: app.Logger, payments: store, provider: &provider{url: providerURL,
		// Covered requests carry the key DerivedKey gives for the request's
		// method, host and path when a keyed handler sends them.
		client: &http.Client{Transport: &idemclient.Transport{}, Timeout: 30 * time.Second}}}

	mux := http.NewServeMux()
	mux.Handle("POST /payments", app.Engine.Middleware(http.HandlerFunc(s.create)))
	mux.HandleFunc("GET /payments", s.list)
	mux.Handle("GET /metrics", app.Ops)
	mux.Handle("/admin/idempotency/", app.Ops)
	srv := &http.Server{Addr: app.Addr, Handler: app.CORS.Handler(mux), ReadTimeout: exampleapp.ReadTimeout}
	if err := app.Serve("net/http", srv.Serve, srv.Shutdown); err != nil {
		log.Fatal(err)
	}
}

type server struct {
	eng      *core.Engine
	log      *slog.Logger
	payments *payments
	provider *provider
}

// createRequest is the body of POST /payments.
type createRequest struct {
	Amount    int64  `json:"amount"`
	Account   string `json:"account"`
	FailAfter string `json:"fail_after"` // "charge", "record" or ""
}

type charge struct {
	ID string `json:"id"`
}

func (s *server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	// At most 1 MiB, idem's bound for a keyed body (a body without a key is
	// refused below, but only once decoded).
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req)
	if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": err.Error()})
		return
	}
	if err != nil || req.Amount <= 0 || req.Account == "" || strings.ContainsRune(req.Account, 0) ||
		req.FailAfter != "" && req.FailAfter != "charge" && req.FailAfter != "record" {
		const want = `want {"amount": positive, "account": non-empty without NUL, "fail_after": "charge", "record" or ""}`
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": want})
		return
	}
	// The key as the Engine reads it (unquoted, or the legacy header), also
	// when the request runs unprotected after a store failure.
	key, _, err := s.eng.Key(r.Header)
	if err != nil || key == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "an Idempotency-Key is required"})
		return
	}
	// A client that hangs up (a timeout of its own) does not cancel the
	// payment: the charge, cut off mid-flight, would fail the step after the
	// provider may have charged, release the key, and the client's retry
	// would charge again (at a provider that does not honour our key). The
	// work runs to its end under the key's lock (the provider call bounded
	// by its client's timeout); the retry gets 409, then the stored answer.
	ctx, user := context.WithoutCancel(r.Context()), r.Header.Get(exampleapp.UserHeader)

	var ran bool // whether the last step ran here, not from its checkpoint
	charging.RLock()
	ch, err := core.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
		ran = true
		return s.provider.charge(ctx, key, req.Amount)
	})
	charging.RUnlock()
	if err != nil {
		s.log.Error("payments: charge failed", "error", err)
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "the payment provider failed"})
		return
	}
	crashIf(req.FailAfter == "charge" && ran, "charge")
	ran = false
	p, err := core.Step(ctx, "record", func(ctx context.Context) (Payment, error) {
		ran = true
		return s.payments.record(ctx, user, Payment{Key: key, Amount: req.Amount, Account: req.Account, ChargeID: ch.ID})
	})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": s.internal("record", err)})
		return
	}
	crashIf(req.FailAfter == "record" && ran, "record")
	writeJSON(w, http.StatusCreated, map[string]any{"id": p.ID, "amount": p.Amount, "account": p.Account, "charge_id": p.ChargeID})
}

// charging is held (read) by the charge steps under way, from before the
// provider's call until its checkpoint is stored, and by crashIf (write).
var charging sync.RWMutex

// crashIf ends the process, as a crash would, if crash is true: once the
// charge steps of the other requests under way here have their checkpoints,
// so that the crash is this request's alone. (A real crash cuts them too,
// and a charge cut between the provider's answer and its checkpoint is
// charged again by a provider that ignores keys: docs/steps.md.)
func crashIf(crash bool, step string) {
	if crash {
		charging.Lock()
		log.Printf("fail_after %q: exiting", step)
		os.Exit(3)
	}
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	list, err := s.payments.list(r.Context())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": s.internal("list", err)})
		return
	}
	if list == nil {
		list = []Payment{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(list), "payments": list})
}

// internal logs err, the failure of op, and returns the fixed message of
// a 500: the error's text may name the database's types and echo the
// request's bytes.
func (s *server) internal(op string, err error) string {
	s.log.Error("payments: "+op+" failed", "error", err)
	return "internal error"
}

// provider is the client of the payment provider.
type provider struct {
	url    string
	client *http.Client
}

// charge charges amount for payment.
func (p *provider) charge(ctx context.Context, payment string, amount int64) (charge, error) {
	body, _ := json.Marshal(map[string]any{"payment": payment, "amount": amount})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/charges", bytes.NewReader(body))
	if err != nil {
		return charge{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return charge{}, fmt.Errorf("provider: %w", err)
	}
	defer resp.Body.Close()
	var c charge
	if resp.StatusCode != http.StatusCreated {
		return c, fmt.Errorf("provider: %s", resp.Status)
	}
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck
}
