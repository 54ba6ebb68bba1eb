package redislock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/redislock"
)

// TestQuotaConformance runs the quota suite on miniredis, one per subtest,
// whose TTLs (FastForward) and TIME (SetTime, which the quota script reads)
// the suite's Advance moves on together.
func TestQuotaConformance(t *testing.T) {
	var (
		mu      sync.Mutex
		servers = map[*testing.T]*miniredis.Miniredis{}
		clocks  = map[*testing.T]time.Time{}
	)
	idemtest.TestQuota(t, func(t *testing.T) core.Store {
		m, c := newMiniredis(t)
		now := time.Now()
		m.SetTime(now)
		mu.Lock()
		servers[t], clocks[t] = m, now
		mu.Unlock()
		return mustNew(t, c, nil)
	}, idemtest.Advance(func(t *testing.T, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		clocks[t] = clocks[t].Add(d)
		servers[t].SetTime(clocks[t])
		servers[t].FastForward(d)
	}))
}

// A refused key leaves no lock behind; the scope's keys carry TTLs; a lock
// that ends leaves its scope's set; the lock token names the scope.
func TestQuotaKeys(t *testing.T) {
	m, c := newMiniredis(t)
	s := mustNew(t, c, &redislock.Options{Prefix: "shop"})
	call := aliceCalls(t, core.Config{Store: s, Quota: core.Quota{InFlight: 1, PerWindow: 5, Window: time.Minute}})
	l, err := call("k1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call("k2"); !errors.Is(err, core.ErrQuotaExceeded) {
		t.Fatalf("second key in flight: %v", err)
	}
	_, lock, _ := s.Keys(core.ID("alice", "k2", ""))
	if m.Exists(lock) {
		t.Fatal("the refused key's lock was left behind")
	}
	var locks, rate string
	for _, k := range m.Keys() {
		switch {
		case strings.HasPrefix(k, "shop-quota:{"):
			locks = k
		case strings.HasPrefix(k, "shop-rate:{"):
			rate = k
		}
	}
	if locks == "" || rate == "" || m.TTL(locks) <= 0 || m.TTL(rate) <= 0 {
		t.Fatalf("scope keys %q (ttl %v), %q (ttl %v); keys %v", locks, m.TTL(locks), rate, m.TTL(rate), m.Keys())
	}
	if strings.Contains(locks, "alice") {
		t.Fatalf("the scope in clear in %q", locks)
	}
	members, _ := m.ZMembers(locks)
	_, token, _ := strings.Cut(locks, "{")
	if len(members) != 1 || !strings.HasSuffix(members[0], "~"+strings.TrimSuffix(token, "}")) {
		t.Fatalf("admitted locks %v", members)
	}
	l.Complete(&core.Record{Code: 201})
	if members, _ := m.ZMembers(locks); len(members) != 0 {
		t.Fatalf("admitted locks after Complete: %v", members)
	}
	l, err = call("k3")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(500, nil)
	if members, _ := m.ZMembers(locks); len(members) != 0 {
		t.Fatalf("admitted locks after Release: %v", members)
	}
	if n, _ := m.ZMembers(rate); len(n) != 2 {
		t.Fatalf("admissions %v, want k1's and k3's", n)
	}
}

// heldLocks is a store whose Engine never refreshes its locks (the test
// does, on the store itself), and which keeps the last lock taken.
type heldLocks struct {
	core.Store
	key, token string
}

func (h *heldLocks) EnforcesQuota() bool { return true }

func (h *heldLocks) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	rec, token, err := h.Store.Acquire(ctx, key, lockTTL)
	if token != "" {
		h.key, h.token = key, token
	}
	return rec, token, err
}

func (*heldLocks) Refresh(context.Context, string, string, time.Duration) error { return nil }

// A refresh moves the admitted lock's slot with the lock (quota_refresh),
// on miniredis (TestIntegrationQuotaRefreshKeepsSlot: on Redis).
func TestQuotaRefreshKeepsSlot(t *testing.T) {
	m, c := newMiniredis(t)
	now := time.Now()
	m.SetTime(now) // the quota scripts read TIME
	testQuotaRefreshKeepsSlot(t, mustNew(t, c, nil), func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	})
}

// testQuotaRefreshKeepsSlot: a lock refreshed past its first lease still
// counts in its scope, so the scope's next key is refused until it ends;
// pass lets time pass for the store.
func testQuotaRefreshKeepsSlot(t *testing.T, s *redislock.Store, pass func(time.Duration)) {
	h := &heldLocks{Store: s}
	call := aliceCalls(t, core.Config{Store: h, LockTTL: time.Second, Quota: core.Quota{InFlight: 1}})
	l, err := call("k1")
	if err != nil || l == nil || !l.Protected() {
		t.Fatalf("first key: %v, %v", l, err)
	}
	defer l.Release(0, nil)
	if err := s.Refresh(context.Background(), h.key, h.token, time.Hour); err != nil {
		t.Fatal(err)
	}
	pass(1500 * time.Millisecond) // past the first lease (1 s), within the refreshed one
	if _, err := call("k2"); !errors.Is(err, core.ErrQuotaExceeded) {
		t.Fatalf("a key of the scope while the refreshed lock runs: %v, want ErrQuotaExceeded", err)
	}
}

// aliceCalls returns a function that acquires a key of scope "alice" on an
// Engine of cfg (no Observer's logging).
func aliceCalls(t *testing.T, cfg core.Config) func(key string) (*core.Lease, error) {
	t.Helper()
	cfg.Observer = func(core.Event) {}
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return func(key string) (*core.Lease, error) {
		l, _, err := eng.Acquire(&core.Call{Context: context.Background(), Scope: "alice", Key: key})
		return l, err
	}
}
