//go:build integration

package blackbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

// TestExamplesQuotaAndSealing is issue 26's done-when, from outside, on
// examples/nethttp with Redis, IDEM_QUOTA_INFLIGHT=5,
// IDEM_QUOTA_PER_MINUTE=100 and IDEM_SEAL_KEYS: a sixth concurrent
// in-flight key of one user gets 429 quota-exceeded while another user's
// key runs; the 101st new key of a user within a minute gets 429 while its
// completed keys still replay; the test's own idem keys in Redis hold no
// order item or Location in clear; restarted with a new primary key in
// front, the old keys still replay and new ones are sealed by the new key;
// a record stored in clear replays only within IDEM_SEAL_CLEAR_UNTIL.
func TestExamplesQuotaAndSealing(t *testing.T) {
	addr := os.Getenv("IDEM_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", addr, err)
	}
	dropOrdersAfter(t, addr)
	bin := build(t, "nethttp")
	oldKey, newKey := sealKey(t), sealKey(t)
	env := []string{"REDIS_URL=redis://" + addr + "/0", "DATABASE_URL=", "IDEM_QUOTA_INFLIGHT=5", "IDEM_QUOTA_PER_MINUTE=100"}
	s := start(t, bin, append(env, "IDEM_SEAL_KEYS=k1:"+oldKey)...)

	run := fmt.Sprint(time.Now().UnixNano()) // users and items of this run only: the windows of earlier runs do not count
	alice, bob, carol := "alice-"+run, "bob-"+run, "carol-"+run
	item := "secret-lamp-" + run
	body := func(delayMS int) string {
		return fmt.Sprintf(`{"item": %q, "qty": 1, "delay_ms": %d}`, item, delayMS)
	}
	var ours []string // store keys of this test's requests

	// Five keys of alice held in flight by a slow handler (delay_ms), seen
	// in flight in the server's locks gauge before the sixth is sent.
	slow := make([]string, 5)
	done := make(chan result, len(slow))
	for i := range slow {
		slow[i] = "slow-" + strconv.Itoa(i) + "-" + run
		ours = append(ours, core.ID(alice, slow[i], ""))
		go func() { done <- s.post(alice, slow[i], body(15000)) }()
	}
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(10 * time.Second); s.metric(t, "idempotency_inflight_requests") < 5; <-poll.C {
		if time.Now().After(deadline) {
			t.Fatalf("%v locks in flight after 10 s, want alice's 5", s.metric(t, "idempotency_inflight_requests"))
		}
	}
	sixth := s.post(alice, "sixth-"+run, body(0))
	wantProblem(t, "sixth in-flight key of a user", sixth, http.StatusTooManyRequests, "quota-exceeded")
	if ra, err := strconv.Atoi(sixth.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("sixth key's Retry-After %q", sixth.header.Get("Retry-After"))
	}
	other := s.post(bob, "bob-"+run, body(0))
	wantStatus(t, "another user's key while alice's five run", other, http.StatusCreated)
	ours = append(ours, core.ID(bob, "bob-"+run, ""))
	firsts := map[string]result{}
	for range slow {
		r := <-done
		wantStatus(t, "a slow key of alice", r, http.StatusCreated)
	}
	for _, k := range slow[:1] {
		firsts[k] = s.post(alice, k, body(15000)) // its replay, for the rotation below
		wantStatus(t, "replay of a slow key", firsts[k], http.StatusCreated)
	}

	// A hundred new keys of carol within the minute run; the 101st is
	// refused with the window's Retry-After; her completed keys replay.
	var carolKeys []string
	for i := range 100 {
		k := fmt.Sprintf("carol-%d-%s", i, run)
		carolKeys = append(carolKeys, k)
		ours = append(ours, core.ID(carol, k, ""))
		r := s.post(carol, k, body(0))
		wantStatus(t, "carol's key "+strconv.Itoa(i+1), r, http.StatusCreated)
		firsts[k] = r
	}
	over := s.post(carol, "carol-101-"+run, body(0))
	wantProblem(t, "101st new key of a user within a minute", over, http.StatusTooManyRequests, "quota-exceeded")
	if ra, err := strconv.Atoi(over.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("101st key's Retry-After %q, want 1 to 60 seconds", over.header.Get("Retry-After"))
	}
	for _, k := range []string{carolKeys[0], carolKeys[99]} {
		wantReplay(t, "carol's completed key over her quota", s.post(carol, k, body(0)), firsts[k])
	}

	// Every idem key of this test in Redis (its store keys, under the
	// example's prefix): sealed, without the item or the Location.
	keys := 0
	for _, id := range ours {
		resp, _, err := mustStore(t, rdb).Keys(id)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := rdb.Get(ctx, resp).Bytes()
		if err != nil {
			t.Fatalf("GET %s: %v", resp, err)
		}
		keys++
		for _, clear := range []string{item, "Location", "/orders/", alice, carol, run} {
			if bytes.Contains(raw, []byte(clear)) {
				t.Fatalf("Redis key %s holds %q in clear", resp, clear)
			}
		}
		if rec, err := core.DecodeRecord(raw); err != nil || rec.SealedBy != "k1" {
			t.Fatalf("Redis key %s: %+v, %v; want a record sealed by k1", resp, rec, err)
		}
	}
	t.Logf("%d records in Redis, all sealed, none with the item or Location in clear", keys)

	// Restarted with a new primary key in front of the old one: old keys
	// replay, new ones are sealed by the new key.
	s2 := start(t, bin, append(env, "IDEM_SEAL_KEYS=k2:"+newKey+",k1:"+oldKey)...)
	wantReplay(t, "a key of the old primary after rotation", s2.post(carol, carolKeys[1], body(0)), firsts[carolKeys[1]])
	wantReplay(t, "alice's slow key after rotation", s2.post(alice, slow[0], body(15000)), firsts[slow[0]])
	wantStatus(t, "a new key after rotation", s2.post(bob, "bob-2-"+run, body(0)), http.StatusCreated)
	resp, _, _ := mustStore(t, rdb).Keys(core.ID(bob, "bob-2-"+run, ""))
	raw, err := rdb.Get(ctx, resp).Bytes()
	if rec, derr := core.DecodeRecord(raw); err != nil || derr != nil || rec.SealedBy != "k2" {
		t.Fatalf("new record after rotation: %v %v; want sealed by k2", err, derr)
	}

	// A record stored in clear (by a server without keys) is refused by a
	// sealing one, since anyone who can write to Redis could have planted
	// it, and replays within IDEM_SEAL_CLEAR_UNTIL.
	dave, clearKey := "dave-"+run, "clear-"+run
	t.Cleanup(func() {
		if resp, lock, err := mustStore(t, rdb).Keys(core.ID(dave, clearKey, "")); err == nil {
			rdb.Del(ctx, resp, lock)
		}
	})
	first := start(t, bin, env...).post(dave, clearKey, `{"item": "book", "qty": 1}`)
	wantStatus(t, "a key stored in clear", first, http.StatusCreated)
	wantProblem(t, "a record in clear to a sealing server", s2.post(dave, clearKey, `{"item": "book", "qty": 1}`),
		http.StatusServiceUnavailable, "store-unavailable")
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	s3 := start(t, bin, append(env, "IDEM_SEAL_KEYS=k2:"+newKey+",k1:"+oldKey, "IDEM_SEAL_CLEAR_UNTIL="+until)...)
	wantReplay(t, "a record in clear within IDEM_SEAL_CLEAR_UNTIL", s3.post(dave, clearKey, `{"item": "book", "qty": 1}`), first)
}

// sealKey returns a fresh base64 AES-256 key.
func sealKey(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// mustStore is a redislock.Store with the examples' prefix, for its Keys.
func mustStore(t *testing.T, c redis.Scripter) *redislock.Store {
	s, err := redislock.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
