package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/redislock"
)

func TestAdminMiniredis(t *testing.T) {
	_, c := newMiniredis(t)
	idemtest.TestAdmin(t, func(t *testing.T) core.Store {
		return mustNew(t, c, &redislock.Options{Prefix: "admin:" + idemtest.Key(t)[:8]})
	})
}

// TestAdminKeys reads what the admin methods leave in Redis, key by key.
func TestAdminKeys(t *testing.T) {
	ctx := context.Background()
	m, c := newMiniredis(t)
	s := mustNew(t, c, &redislock.Options{Prefix: "shop"})
	key := idemtest.Key(t)
	resp, lock, _ := s.Keys(key)

	// A lock taken by another release (a token without its time) is in
	// flight, of unknown age, and listed after the others.
	m.Set(lock, "old-token")
	m.SetTTL(lock, time.Minute)
	other := idemtest.Key(t)
	if _, _, err := s.Acquire(ctx, other, time.Minute); err != nil {
		t.Fatal(err)
	}
	st, err := s.Inspect(ctx, key)
	if err != nil || st.Record != nil || !st.LockedAt.IsZero() || st.Expires.IsZero() {
		t.Fatalf("Inspect of an old lock = %+v, %v", st, err)
	}
	locks, err := s.InFlight(ctx, 10)
	if err != nil || len(locks) != 2 || locks[0].Key != other || locks[1].Key != key {
		t.Fatalf("InFlight = %+v, %v; want %s then the old lock %s", locks, err, other, key)
	}
	if err := s.Purge(ctx, key); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("Purge of a locked key: %v", err)
	}
	if got, _ := m.Get(lock); got != "old-token" {
		t.Fatalf("the refused Purge changed the lock to %q", got)
	}

	// Purge leaves neither the record nor its own lock.
	m.Del(lock)
	m.Set(resp, "record")
	if err := s.Purge(ctx, key); err != nil {
		t.Fatal(err)
	}
	if m.Exists(resp) || m.Exists(lock) {
		t.Fatalf("after Purge: record %v, lock %v; want neither", m.Exists(resp), m.Exists(lock))
	}
	// Nor does a purge of nothing.
	if err := s.Purge(ctx, key); !errors.Is(err, core.ErrNotFound) || m.Exists(lock) {
		t.Fatalf("Purge of nothing: %v, lock left: %v", err, m.Exists(lock))
	}
	// A record without a TTL has no expiry.
	m.Set(resp, "record")
	if st, err := s.Inspect(ctx, key); err != nil || string(st.Record) != "record" || !st.Expires.IsZero() {
		t.Fatalf("Inspect of a record without TTL = %+v, %v", st, err)
	}
	if _, err := s.Inspect(ctx, "a{b"); !errors.Is(err, redislock.ErrInvalidStoreKey) {
		t.Fatalf("Inspect of a bad key: %v", err)
	}
}

// TestAdminPrefixPattern: a prefix holding glob characters lists its own
// locks only.
func TestAdminPrefixPattern(t *testing.T) {
	ctx := context.Background()
	_, c := newMiniredis(t)
	star := mustNew(t, c, &redislock.Options{Prefix: "a*"})
	plain := mustNew(t, c, &redislock.Options{Prefix: "ab"})
	k1, k2 := idemtest.Key(t), idemtest.Key(t)
	star.Acquire(ctx, k1, time.Minute)
	plain.Acquire(ctx, k2, time.Minute)
	for _, tt := range []struct {
		s    *redislock.Store
		want string
	}{{star, k1}, {plain, k2}} {
		got, err := tt.s.InFlight(ctx, 10)
		if err != nil || len(got) != 1 || got[0].Key != tt.want {
			t.Errorf("InFlight = %+v, %v; want %s alone", got, err, tt.want)
		}
	}
}

// TestAdminStoreDown: every admin method reports a store error.
func TestAdminStoreDown(t *testing.T) {
	ctx := context.Background()
	m, c := newMiniredis(t)
	s := mustNew(t, c, nil)
	m.Close()
	key := idemtest.Key(t)
	if _, err := s.Inspect(ctx, key); err == nil || errors.Is(err, core.ErrNotFound) {
		t.Errorf("Inspect: %v", err)
	}
	for name, err := range map[string]error{"Purge": s.Purge(ctx, key), "Unlock": s.Unlock(ctx, key)} {
		if err == nil || errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrInFlight) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := s.InFlight(ctx, 1); err == nil {
		t.Error("InFlight: no error")
	}
}

type scripterOnly struct{ redis.Scripter }

func TestAdminNoScan(t *testing.T) {
	_, c := newMiniredis(t)
	s := mustNew(t, scripterOnly{c}, nil)
	if _, err := s.InFlight(context.Background(), 1); !errors.Is(err, redislock.ErrNoScan) {
		t.Fatalf("InFlight on a Scripter: %v, want ErrNoScan", err)
	}
}
