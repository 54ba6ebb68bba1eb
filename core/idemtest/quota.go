package idemtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// TestQuota runs the conformance suite of core.Config.Quota on the stores
// newStore returns, through an Engine: 200 concurrent new keys of one
// scope, of which exactly the bound are admitted, other scopes unaffected,
// 100 concurrent duplicates of one key run once and take one slot,
// replays never refused, slots freed by completion, release and a crashed
// lock's expiry, and the window sliding. opts as for TestStore.
func TestQuota(t *testing.T, newStore func(t *testing.T) core.Store, opts ...Option) {
	t.Helper()
	o := newOptions(opts)
	tests := []struct {
		name string
		fn   func(t *testing.T, s core.Store, o *options)
	}{
		{"InFlightBoundExact", testQuotaInFlight},
		{"PerWindowBoundExact", testQuotaPerWindow},
		{"ReplaysNeverRefused", testQuotaReplays},
		{"ConcurrentDuplicatesRunOnce", testQuotaDuplicates},
		{"CrashedLockFreesItsSlot", testQuotaCrashedLock},
		{"AdminUnlockFreesItsSlot", testQuotaAdminUnlock},
		{"WindowSlides", testQuotaWindowSlides},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o.run(t, func(t *testing.T) { tt.fn(t, newStore(t), o) })
		})
	}
}

// quotaEngine is an Engine over s with quota q, and the events it reports.
func quotaEngine(t *testing.T, s core.Store, q core.Quota, cfg core.Config) (*core.Engine, *outcomes) {
	t.Helper()
	ev := &outcomes{}
	cfg.Store, cfg.Quota, cfg.Observer = s, q, ev.observe
	cfg.StoreTimeout = time.Minute // 200 calls at once on a fake server under -race
	return newEngine(t, cfg), ev
}

type outcomes struct {
	mu       sync.Mutex
	n        map[core.Outcome]int
	storeErr error // the first store error
}

func (o *outcomes) observe(ev core.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = make(map[core.Outcome]int)
	}
	o.n[ev.Outcome]++
	if ev.Outcome == core.OutcomeStoreError && o.storeErr == nil {
		o.storeErr = ev.Err
	}
}

func (o *outcomes) count(oc core.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[oc]
}

// quotaCall is a call of key in scope.
func quotaCall(scope, key string) *core.Call {
	return &core.Call{Context: context.Background(), Key: key, Scope: scope, Method: "Test", Route: "/test",
		Fingerprint: sha256.Sum256([]byte("request"))}
}

// admitAll makes n concurrent calls of new keys of scope and returns the
// leases admitted, the refusals and any other error. With complete, each
// admitted call completes at once (a TxStore's leases hold a connection
// each: not a hundred at once).
func admitAll(t *testing.T, e *core.Engine, scope string, n int, complete bool) (leases []*core.Lease, refused []*core.QuotaError) {
	t.Helper()
	var mu sync.Mutex
	together(n, func(int) {
		l, rec, err := e.Acquire(quotaCall(scope, Key(t)))
		if complete && l != nil {
			l.Complete(&core.Record{Code: 201})
		}
		mu.Lock()
		defer mu.Unlock()
		var qe *core.QuotaError
		switch {
		case errors.As(err, &qe) && errors.Is(err, core.ErrQuotaExceeded):
			refused = append(refused, qe)
		case err != nil || rec != nil || l == nil || !l.Protected():
			t.Errorf("Acquire of a new key: lease %t, record %t, err %v; want a protected lease or a *QuotaError", l != nil && l.Protected(), rec != nil, err)
		default:
			leases = append(leases, l)
		}
	})
	return leases, refused
}

func wantAdmitted(t *testing.T, e *core.Engine, scope string) *core.Lease {
	t.Helper()
	l, rec, err := e.Acquire(quotaCall(scope, Key(t)))
	if err != nil || rec != nil || l == nil || !l.Protected() {
		t.Fatalf("Acquire of a new key of scope %q: lease %t, record %t, err %v; want a protected lease", scope, l != nil && l.Protected(), rec != nil, err)
	}
	return l
}

func wantRefused(t *testing.T, e *core.Engine, scope string) *core.QuotaError {
	t.Helper()
	_, _, err := e.Acquire(quotaCall(scope, Key(t)))
	var qe *core.QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, core.ErrQuotaExceeded) {
		t.Fatalf("Acquire of a key over the quota: err = %v, want a *QuotaError", err)
	}
	return qe
}

// Of 200 concurrent new keys of one scope, exactly InFlight run; another
// scope's key runs meanwhile; a key that completes frees its slot.
func testQuotaInFlight(t *testing.T, s core.Store, _ *options) {
	e, ev := quotaEngine(t, s, core.Quota{InFlight: 5}, core.Config{})
	scope := "quota-" + Key(t)
	leases, refused := admitAll(t, e, scope, 200, false)
	if len(leases) != 5 || len(refused) != 195 {
		t.Fatalf("admitted %d, refused %d of 200 (store error: %v); want 5 and 195", len(leases), len(refused), ev.storeErr)
	}
	for _, qe := range refused {
		if qe.RetryAfter != 0 {
			t.Fatalf("an in-flight refusal's RetryAfter = %v, want 0 (unknown)", qe.RetryAfter)
		}
	}
	if n := ev.count(core.OutcomeQuota); n != 195 {
		t.Fatalf("%d OutcomeQuota events, want 195", n)
	}
	other := wantAdmitted(t, e, "quota-other-"+Key(t))
	defer other.Release(0, nil)
	wantRefused(t, e, scope)
	leases[0].Complete(&core.Record{Code: 201})
	leases[1].Release(0, nil)
	l6, l7 := wantAdmitted(t, e, scope), wantAdmitted(t, e, scope)
	wantRefused(t, e, scope)
	for _, l := range append(leases[2:], l6, l7) {
		l.Release(0, nil)
	}
}

// Of 200 concurrent new keys of one scope, exactly PerWindow are admitted;
// the refused learn when the window has room; another scope is admitted.
func testQuotaPerWindow(t *testing.T, s core.Store, _ *options) {
	const window = time.Hour
	e, ev := quotaEngine(t, s, core.Quota{PerWindow: 100, Window: window}, core.Config{})
	scope := "quota-" + Key(t)
	leases, refused := admitAll(t, e, scope, 200, true)
	if len(leases) != 100 || len(refused) != 100 {
		t.Fatalf("admitted %d, refused %d of 200 (store error: %v); want 100 and 100", len(leases), len(refused), ev.storeErr)
	}
	for _, qe := range refused {
		if qe.RetryAfter <= 0 || qe.RetryAfter > window {
			t.Fatalf("RetryAfter = %v, want within (0, %v]", qe.RetryAfter, window)
		}
	}
	wantRefused(t, e, scope) // completed keys still count in the window
	wantAdmitted(t, e, "quota-other-"+Key(t)).Release(0, nil)
}

// A scope at both bounds still gets its completed keys replayed.
func testQuotaReplays(t *testing.T, s core.Store, _ *options) {
	e, ev := quotaEngine(t, s, core.Quota{InFlight: 1, PerWindow: 2, Window: time.Hour}, core.Config{})
	scope, done := "quota-"+Key(t), Key(t)
	l, _, err := e.Acquire(quotaCall(scope, done))
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v, %v", l, err)
	}
	l.Complete(&core.Record{Code: 201, Body: []byte("first")})
	held := wantAdmitted(t, e, scope) // the window is full, the one slot taken
	defer held.Release(0, nil)
	wantRefused(t, e, scope)
	for range 3 {
		l, rec, err := e.Acquire(quotaCall(scope, done))
		if err != nil || l != nil || rec == nil || string(rec.Body) != "first" {
			t.Fatalf("replay of a completed key over the quota = %v, %v, %v", l, rec, err)
		}
	}
	if n := ev.count(core.OutcomeReplay); n != 3 {
		t.Fatalf("%d replays, want 3", n)
	}
}

// Of 100 concurrent duplicates of one new key of a scope under a quota,
// one runs and takes one slot: the others are answered in flight (or
// refused), and take none, so that another new key is still admitted
// while the key runs; once it completes, 100 duplicates at once are its
// replays, and take no slot either.
func testQuotaDuplicates(t *testing.T, s core.Store, _ *options) {
	const n = 100
	e, ev := quotaEngine(t, s, core.Quota{InFlight: 2, PerWindow: 2, Window: time.Hour}, core.Config{})
	scope, key := "quota-"+Key(t), Key(t)
	burst := func() (leases []*core.Lease, records int) {
		var mu sync.Mutex
		together(n, func(int) {
			l, rec, err := e.Acquire(quotaCall(scope, key))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case l != nil && l.Protected() && err == nil:
				leases = append(leases, l)
			case rec != nil && err == nil:
				if rec.Code != 201 || string(rec.Body) != "once" {
					t.Errorf("replay: %d %q, want 201 \"once\"", rec.Code, rec.Body)
				}
				records++
			case errors.Is(err, core.ErrInFlight), errors.Is(err, core.ErrQuotaExceeded):
			default:
				t.Errorf("duplicate: lease %v, record %v, err %v; want a lease, the replay, ErrInFlight or ErrQuotaExceeded", l, rec, err)
			}
		})
		return leases, records
	}
	leases, records := burst()
	if len(leases) != 1 || records != 0 {
		for _, l := range leases {
			l.Release(0, nil)
		}
		t.Fatalf("%d duplicates of a new key: %d leases, %d replays (store error: %v); want 1 lease", n, len(leases), records, ev.storeErr)
	}
	// The duplicates took no slot: the second of InFlight and PerWindow is free.
	wantAdmitted(t, e, scope).Release(0, nil)
	wantRefused(t, e, scope)
	leases[0].Complete(&core.Record{Code: 201, Body: []byte("once")})
	if again, records := burst(); len(again) != 0 || records != n {
		for _, l := range again {
			l.Release(0, nil)
		}
		t.Fatalf("%d duplicates of the completed key: %d leases, %d replays; want none and %d", n, len(again), records, n)
	}
}

// noRefresh is a store whose locks are never refreshed: its process died.
type noRefresh struct{ core.Store }

func (noRefresh) Refresh(context.Context, string, string, time.Duration) error {
	return errors.New("process gone")
}

func (s noRefresh) Unwrap() core.Store { return s.Store }

// A lock whose process died frees its slot when it expires.
func testQuotaCrashedLock(t *testing.T, s core.Store, o *options) {
	if _, ok := s.(core.TxStore); ok {
		t.Skip("a TxStore's key is held by a transaction, which ends with its process")
	}
	const lockTTL = time.Second
	q := core.Quota{InFlight: 1}
	dead, _ := quotaEngine(t, noRefresh{s}, q, core.Config{LockTTL: lockTTL})
	live, _ := quotaEngine(t, s, q, core.Config{LockTTL: lockTTL})
	scope := "quota-" + Key(t)
	crashed := wantAdmitted(t, dead, scope)
	wantRefused(t, live, scope)
	o.pass(t, lockTTL+10*time.Millisecond)
	wantAdmitted(t, live, scope).Release(0, nil)
	crashed.Release(0, nil)
}

// An operator's Unlock (core.Admin) frees the lock's slot at once, not
// when the lock would have expired.
func testQuotaAdminUnlock(t *testing.T, s core.Store, _ *options) {
	admin, ok := s.(core.Admin)
	if !ok {
		t.Skip("the store is not a core.Admin")
	}
	if _, ok := s.(core.TxStore); ok {
		t.Skip("a TxStore's key is held by a transaction, which Unlock does not end")
	}
	e, _ := quotaEngine(t, s, core.Quota{InFlight: 1}, core.Config{})
	scope, key := "quota-"+Key(t), Key(t)
	held, _, err := e.Acquire(quotaCall(scope, key))
	if err != nil || held == nil || !held.Protected() {
		t.Fatalf("Acquire: lease %v, err %v; want a protected lease", held, err)
	}
	defer held.Release(0, nil)
	wantRefused(t, e, scope)
	if err := admin.Unlock(context.Background(), core.ID(scope, key, "")); err != nil {
		t.Fatalf("Unlock of the held key: %v", err)
	}
	wantAdmitted(t, e, scope).Release(0, nil)
}

// An admission leaves the window Window after it was made.
func testQuotaWindowSlides(t *testing.T, s core.Store, o *options) {
	window := time.Minute
	if !o.fake && o.advance == nil {
		window = 2 * time.Second // real time
	}
	e, _ := quotaEngine(t, s, core.Quota{PerWindow: 2, Window: window}, core.Config{})
	scope := "quota-" + Key(t)
	start := time.Now()
	wantAdmitted(t, e, scope).Complete(&core.Record{Code: 201})
	wantAdmitted(t, e, scope).Complete(&core.Record{Code: 201})
	_, _, err := e.Acquire(quotaCall(scope, Key(t)))
	if time.Since(start) >= window {
		t.Skip("the machine took longer than the window to make three calls")
	}
	var qe *core.QuotaError
	if !errors.As(err, &qe) || qe.RetryAfter <= 0 || qe.RetryAfter > window {
		t.Fatalf("third key in the window: err = %v, want a *QuotaError with a RetryAfter within (0, %v]", err, window)
	}
	o.pass(t, window)
	wantAdmitted(t, e, scope).Release(0, nil)
}
