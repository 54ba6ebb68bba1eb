package core_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

// A new key over the quota gets 429, problem quota-exceeded and
// Retry-After (the window's, rounded up to seconds; Config.RetryAfter for a
// key in flight); the handler does not run; replays are answered; the
// event is OutcomeQuota with status 429.
func TestQuotaOverHTTP(t *testing.T) { synctest.Test(t, testQuotaOverHTTP) }

func testQuotaOverHTTP(t *testing.T) {
	var ev events
	eng, err := core.New(core.Config{Scope: byUser, Quota: core.Quota{InFlight: 1, PerWindow: 2, Window: 90 * time.Second},
		RetryAfter: 3 * time.Second, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	hold, held := make(chan struct{}), make(chan struct{})
	runs := 0
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if r.Header.Get("Idempotency-Key") == "slow" {
			close(held)
			<-hold
		}
		w.WriteHeader(http.StatusCreated)
	}))
	wantQuota := func(w interface {
		Result() *http.Response
	}, retryAfter string) {
		t.Helper()
		resp := w.Result()
		var p core.Problem
		json.NewDecoder(resp.Body).Decode(&p) //nolint:errcheck
		if resp.StatusCode != http.StatusTooManyRequests || p.Type != problemType("quota-exceeded") || p.Status != 429 ||
			resp.Header.Get("Retry-After") != retryAfter || resp.Header.Get("Content-Type") != contentTypeProblem {
			t.Fatalf("over the quota: %d %+v Retry-After %q", resp.StatusCode, p, resp.Header.Get("Retry-After"))
		}
	}
	go postAs(h, "alice", "slow")
	<-held
	wantQuota(postAs(h, "alice", "second"), "3") // in flight: Config.RetryAfter
	if w := postAs(h, "bob", "other"); w.Code != http.StatusCreated {
		t.Fatalf("another user: %d", w.Code)
	}
	close(hold)
	synctest.Wait()
	advance(30 * time.Second)
	if w := postAs(h, "alice", "third"); w.Code != http.StatusCreated {
		t.Fatalf("after the first finished: %d", w.Code)
	}
	wantQuota(postAs(h, "alice", "fourth"), "60") // the window: 90 s less the 30 s gone
	if w := postAs(h, "alice", "third"); w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "true" {
		t.Fatalf("replay over the quota: %d %v", w.Code, w.Header())
	}
	if runs != 3 || ev.count(core.OutcomeQuota) != 2 || ev.count(core.OutcomeReplay) != 1 {
		t.Fatalf("runs %d, quota events %d, replays %d", runs, ev.count(core.OutcomeQuota), ev.count(core.OutcomeReplay))
	}
	for _, e := range ev.all {
		if e.Outcome == core.OutcomeQuota && (e.Code != 429 || e.Scope != "alice" || !errors.Is(e.Err, core.ErrQuotaExceeded)) {
			t.Fatalf("quota event %+v", e)
		}
	}
	advance(60 * time.Second)
	if w := postAs(h, "alice", "fourth"); w.Code != http.StatusCreated {
		t.Fatalf("once the window slid: %d", w.Code)
	}
}

func TestNewRefusesQuotaItCannotEnforce(t *testing.T) {
	for name, cfg := range map[string]core.Config{
		"store without quotas": {Store: plainStore{core.NewMemoryStore(0)}, Quota: core.Quota{InFlight: 1}},
		"negative bound":       {Quota: core.Quota{InFlight: -1}},
		"negative window":      {Quota: core.Quota{PerWindow: 1, Window: -time.Second}},
	} {
		if _, err := core.New(cfg); err == nil || !strings.Contains(err.Error(), "Quota") {
			t.Errorf("%s: New = %v, want an error naming Quota", name, err)
		}
	}
	// An unset quota needs nothing of the store; an instrumented store
	// enforces what it wraps.
	for _, cfg := range []core.Config{
		{Store: plainStore{core.NewMemoryStore(0)}},
		{Store: instrument.Store(core.NewMemoryStore(0), func(context.Context, instrument.Op, time.Duration, error, int) {}), Quota: core.Quota{InFlight: 1}},
		{Store: core.NewTiered(core.NewMemoryStore(0), core.NewMemoryStore(0)), Quota: core.Quota{InFlight: 1}},
	} {
		if _, err := core.New(cfg); err != nil {
			t.Errorf("New(%T) = %v", cfg.Store, err)
		}
	}
	tiered := core.NewTiered(core.NewMemoryStore(0), plainStore{core.NewMemoryStore(0)})
	if _, err := core.New(core.Config{Store: tiered, Quota: core.Quota{InFlight: 1}}); err == nil {
		t.Error("New accepted a tiered store whose durable tier enforces no quota")
	}
}

func quotaCall(scope, key string) *core.Call {
	return &core.Call{Key: key, Scope: scope, Fingerprint: sha256.Sum256([]byte("r"))}
}

// With either tier down the other keeps the bound; a refusal of a key
// whose record the fast tier lost replays it from the durable tier.
func TestTieredQuota(t *testing.T) { synctest.Test(t, testTieredQuota) }

func testTieredQuota(t *testing.T) {
	for _, down := range []string{"fast", "durable"} {
		fast, durable := newTier(), newTier()
		map[string]*tier{"fast": fast, "durable": durable}[down].set(true, false)
		eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Quota: core.Quota{InFlight: 2}, Observer: func(core.Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for i := range 5 {
			if l, _, err := eng.Acquire(quotaCall("s", string(rune('a'+i)))); err == nil && l.Protected() {
				admitted++
			} else if !errors.Is(err, core.ErrQuotaExceeded) {
				t.Fatalf("%s down: Acquire = %v, %v", down, l, err)
			}
		}
		if admitted != 2 {
			t.Fatalf("%s tier down: %d admitted of 5, want 2", down, admitted)
		}
	}

	fast, durable := newTier(), newTier()
	eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Quota: core.Quota{PerWindow: 1, Window: time.Hour}, Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	l, _, _ := eng.Acquire(quotaCall("s", "done"))
	l.Complete(&core.Record{Code: 201, Body: []byte("kept")})
	fast.s = core.NewMemoryStore(0) // Redis lost its data
	// The fast tier admits a new key, the durable one refuses it (its
	// window holds "done"); now both windows are full.
	if _, _, err := eng.Acquire(quotaCall("s", "new")); !errors.Is(err, core.ErrQuotaExceeded) {
		t.Fatalf("a new key over the durable tier's quota: %v", err)
	}
	if l, rec, err := eng.Acquire(quotaCall("s", "done")); err != nil || l != nil || string(rec.Body) != "kept" {
		t.Fatalf("replay of a key the fast tier lost, its window full: %v, %v, %v", l, rec, err)
	}
}

// Plans with different bounds are Engines on one store (docs/design.md,
// "Quotas"): each scope gets its Engine's bound, and a key its tenant
// retries through another plan's Engine is still the one key.
func TestQuotaPerPlan(t *testing.T) {
	store := core.NewMemoryStore(0)
	plan := func(inFlight int) *core.Engine {
		eng, err := core.New(core.Config{Store: store, Quota: core.Quota{InFlight: inFlight}, Observer: func(core.Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		return eng
	}
	free, pro := plan(1), plan(2)
	admitted := func(eng *core.Engine, scope string, keys ...string) (n int) {
		t.Helper()
		for _, k := range keys {
			l, _, err := eng.Acquire(quotaCall(scope, k))
			switch {
			case err == nil && l.Protected():
				n++
				t.Cleanup(func() { l.Release(0, nil) }) // not refreshed after the test
			case !errors.Is(err, core.ErrQuotaExceeded):
				t.Fatalf("%s's key %s: %v, %v", scope, k, l, err)
			}
		}
		return n
	}
	if n := admitted(free, "alice", "a1", "a2", "a3"); n != 1 {
		t.Fatalf("free plan: %d keys of alice in flight, want 1", n)
	}
	if n := admitted(pro, "bob", "b1", "b2", "b3"); n != 2 {
		t.Fatalf("pro plan: %d keys of bob in flight, want 2", n)
	}
	// alice moves to pro while a1 runs: a1 is still in flight, a new key
	// has pro's second slot.
	if _, _, err := pro.Acquire(quotaCall("alice", "a1")); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("a1 through the pro Engine while it runs: %v, want ErrInFlight", err)
	}
	if n := admitted(pro, "alice", "a4", "a5"); n != 1 {
		t.Fatalf("alice on pro beside a1: %d keys admitted, want 1", n)
	}
}
