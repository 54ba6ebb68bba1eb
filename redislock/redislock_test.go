package redislock_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/redislock"
)

func TestConformanceMiniredis(t *testing.T) {
	var servers miniredisPerTest
	idemtest.TestStore(t, func(t *testing.T) core.Store { return mustNew(t, servers.client(t), nil) }, servers.advance())
	_, c := newMiniredis(t)
	idemtest.TestLease(t, func(t *testing.T) core.Store { return mustNew(t, c, nil) })
}

// TestConformanceAutoPipeline runs the store on go-redis's AutoPipeliner,
// which batches the scripts of concurrent requests into pipelines.
func TestConformanceAutoPipeline(t *testing.T) {
	var servers miniredisPerTest
	idemtest.TestStore(t, func(t *testing.T) core.Store {
		ap, err := servers.client(t).AutoPipeline()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ap.Close() })
		return mustNew(t, ap, nil)
	}, servers.advance())
}

// miniredisPerTest gives each subtest of a conformance suite a miniredis of
// its own, whose clock the suite's Advance moves on at once.
type miniredisPerTest struct {
	mu      sync.Mutex
	servers map[*testing.T]*miniredis.Miniredis
}

func (p *miniredisPerTest) client(t *testing.T) *redis.Client {
	m, c := newMiniredis(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.servers == nil {
		p.servers = map[*testing.T]*miniredis.Miniredis{}
	}
	p.servers[t] = m
	return c
}

func (p *miniredisPerTest) advance() idemtest.Option {
	return idemtest.Advance(func(t *testing.T, d time.Duration) {
		p.mu.Lock()
		m := p.servers[t]
		p.mu.Unlock()
		m.FastForward(d)
	})
}

func TestKeys(t *testing.T) {
	_, c := newMiniredis(t)
	id := idemtest.Key(t)
	tests := []struct {
		prefix     string
		resp, lock string
	}{
		{"", "idempotency:{" + id + "}", "idempotency-lock:{" + id + "}"},
		{"app1:idem", "app1:idem:{" + id + "}", "app1:idem-lock:{" + id + "}"},
	}
	for _, tt := range tests {
		resp, lock, err := mustNew(t, c, &redislock.Options{Prefix: tt.prefix}).Keys(id)
		if err != nil || resp != tt.resp || lock != tt.lock {
			t.Errorf("prefix %q: Keys = %q, %q, %v; want %q, %q", tt.prefix, resp, lock, err, tt.resp, tt.lock)
		}
	}
	s := mustNew(t, c, nil)
	for _, key := range []string{"", "a}b", "{x}", "}", "{"} {
		if _, _, err := s.Keys(key); !errors.Is(err, redislock.ErrInvalidStoreKey) {
			t.Errorf("Keys(%q): err = %v, want ErrInvalidStoreKey", key, err)
		}
		if _, _, err := s.Acquire(context.Background(), key, time.Minute); !errors.Is(err, redislock.ErrInvalidStoreKey) {
			t.Errorf("Acquire(%q): err = %v, want ErrInvalidStoreKey", key, err)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	_, c := newMiniredis(t)
	for _, tt := range []struct {
		name   string
		client redis.Scripter
		opts   *redislock.Options
		want   error
	}{
		{"prefix with {", c, &redislock.Options{Prefix: "a{b"}, redislock.ErrInvalidPrefix},
		{"prefix with }", c, &redislock.Options{Prefix: "a}"}, redislock.ErrInvalidPrefix},
		{"prefix of another's locks", c, &redislock.Options{Prefix: "idempotency-lock"}, redislock.ErrInvalidPrefix},
		{"prefix of another's rate", c, &redislock.Options{Prefix: "x-rate"}, redislock.ErrInvalidPrefix},
		{"nil client", nil, nil, redislock.ErrNilClient},
		{"nil *redis.Client", (*redis.Client)(nil), nil, redislock.ErrNilClient},
		{"nil *redis.ClusterClient", (*redis.ClusterClient)(nil), nil, redislock.ErrNilClient},
		{"nil *redis.Client, no batching", (*redis.Client)(nil), &redislock.Options{DisableBatching: true}, redislock.ErrNilClient},
	} {
		if s, err := redislock.New(tt.client, tt.opts); !errors.Is(err, tt.want) || s != nil {
			t.Errorf("%s: New = %v, %v; want nil, %v", tt.name, s, err, tt.want)
		}
	}
}

// TestTTLs checks the TTLs the scripts set, as Redis reports them.
func TestTTLs(t *testing.T) {
	ctx := context.Background()
	m, c := newMiniredis(t)
	s := mustNew(t, c, nil)
	key := idemtest.Key(t)
	resp, lock, _ := s.Keys(key)

	_, token, err := s.Acquire(ctx, key, 90*time.Second)
	if err != nil || token == "" {
		t.Fatalf("Acquire = %q, %v", token, err)
	}
	if got, _ := m.Get(lock); got != token {
		t.Errorf("lock key holds %q, want the token %q", got, token)
	}
	if ttl := m.TTL(lock); ttl != 90*time.Second {
		t.Errorf("lock TTL = %v, want 90s", ttl)
	}
	if err := s.Refresh(ctx, key, token, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := m.TTL(lock); ttl != 3*time.Minute {
		t.Errorf("refreshed lock TTL = %v, want 3m", ttl)
	}
	steps := "idempotency-steps:{" + key + "}"
	if err := s.SaveStep(ctx, key, token, "charge", []byte("ch_1"), 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := m.HGet(steps, "charge"); got != "ch_1" || m.TTL(steps) != 72*time.Hour {
		t.Errorf("steps key: charge %q, TTL %v; want ch_1, 72h", got, m.TTL(steps))
	}
	if err := s.Complete(ctx, key, token, []byte("rec"), 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	if m.Exists(steps) {
		t.Error("steps key still there after Complete")
	}
	if ttl := m.TTL(resp); ttl != 72*time.Hour {
		t.Errorf("record TTL = %v, want 72h", ttl)
	}
	if m.Exists(lock) {
		t.Error("lock key still there after Complete")
	}

	// A TTL under a millisecond is rounded up: Redis refuses PX 0.
	key = idemtest.Key(t)
	if _, _, err := s.Acquire(ctx, key, time.Microsecond); err != nil {
		t.Fatalf("Acquire with a 1µs TTL: %v", err)
	}
	if _, lock, _ := s.Keys(key); m.TTL(lock) != time.Millisecond {
		t.Errorf("1µs lock TTL = %v, want 1ms", m.TTL(lock))
	}
}

// TestRoundTrips counts Redis round trips per request through the Engine.
func TestRoundTrips(t *testing.T) {
	_, c := newMiniredis(t)
	var cnt counter
	c.AddHook(&cnt)
	a := newApp(t, mustNew(t, c, nil), core.Config{})

	// Warm up: the first run of each script on a Redis is EVALSHA, NOSCRIPT,
	// EVAL: one extra round trip, once per script per Redis node.
	a.do(testKey(t, 0))
	a.do(testKey(t, 0) + "-fail")
	a.doPath("/orders?fail", testKey(t, 1))
	cnt.take()

	key := testKey(t, 2)
	if w := a.do(key); w.Code != http.StatusCreated {
		t.Fatalf("first request: %d", w.Code)
	}
	if n := cnt.take(); n != 2 {
		t.Errorf("first request: %d round trips, want 2", n)
	}
	if w := a.do(key); w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "true" {
		t.Fatalf("replay: %d %v", w.Code, w.Header())
	}
	if n := cnt.take(); n != 1 {
		t.Errorf("replay: %d round trips, want 1", n)
	}
	if w := a.do(""); w.Code != http.StatusCreated {
		t.Fatalf("no key: %d", w.Code)
	}
	if n := cnt.take(); n != 0 {
		t.Errorf("request without a key: %d round trips, want 0", n)
	}
	if w := a.doPath("/orders?fail", testKey(t, 3)); w.Code != http.StatusInternalServerError {
		t.Fatalf("failing request: %d", w.Code)
	}
	if n := cnt.take(); n != 2 {
		t.Errorf("5xx (acquire, release): %d round trips, want 2", n)
	}

	// In flight: the first request holds the lock while a duplicate comes.
	a.block, a.started = make(chan struct{}), make(chan struct{}, 1)
	key = testKey(t, 4)
	first := make(chan int)
	go func() { first <- a.do(key).Code }()
	<-a.started
	cnt.take()
	if w := a.do(key); w.Code != http.StatusConflict || w.Header().Get("Retry-After") == "" {
		t.Fatalf("duplicate in flight: %d %v", w.Code, w.Header())
	}
	if n := cnt.take(); n != 1 {
		t.Errorf("conflict: %d round trips, want 1", n)
	}
	close(a.block)
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("first request: %d", code)
	}
}

// TestLateCompletionFenced lets a lock expire under a running handler: a
// duplicate takes the key over and completes, and the late completion of the
// first request neither overwrites the record nor reports success.
func TestLateCompletionFenced(t *testing.T) {
	m, c := newMiniredis(t)
	store := mustNew(t, c, nil)
	slow := newApp(t, store, core.Config{LockTTL: time.Minute})
	slow.block, slow.started = make(chan struct{}), make(chan struct{}, 1)
	fast := newApp(t, store, core.Config{LockTTL: time.Minute})
	fast.runs.Store(100) // tell the two handlers' bodies apart

	key := testKey(t, 0)
	done := make(chan []byte)
	go func() { done <- slow.do(key).Body.Bytes() }()
	<-slow.started
	m.FastForward(2 * time.Minute) // the slow request's lock expires

	w := fast.do(key)
	if w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "" {
		t.Fatalf("takeover: %d %v", w.Code, w.Header())
	}
	if ev := fast.event(t); ev.Outcome != core.OutcomeStored {
		t.Fatalf("takeover outcome = %v (%v), want stored", ev.Outcome, ev.Err)
	}
	close(slow.block)
	<-done
	if ev := slow.event(t); ev.Outcome != core.OutcomeLockLost || !errors.Is(ev.Err, core.ErrLockLost) {
		t.Fatalf("late completion outcome = %v (%v), want lock_lost", ev.Outcome, ev.Err)
	}
	r := fast.do(key)
	if r.Header().Get(core.HeaderReplay) != "true" || !bytes.Equal(r.Body.Bytes(), w.Body.Bytes()) {
		t.Fatalf("replay after the late completion = %q, want the takeover's %q", r.Body, w.Body)
	}
}

// TestStoreDown stops Redis under an app: fail-open runs the handler and
// reports the error, fail-closed answers 503; when Redis is back,
// protection resumes without a restart of the app.
func TestStoreDown(t *testing.T) {
	m, c := newMiniredis(t)
	store := mustNew(t, c, nil)
	open := newApp(t, store, core.Config{})
	closed := newApp(t, store, core.Config{FailClosed: true})

	before := testKey(t, 0)
	if w := open.do(before); w.Code != http.StatusCreated {
		t.Fatalf("before the outage: %d", w.Code)
	}
	open.drainEvents()
	m.Close()

	runs := open.runs.Load()
	for i := range 3 {
		if w := open.do(before); w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "" {
			t.Fatalf("fail-open #%d: %d %v, want the handler's 201", i, w.Code, w.Header())
		}
		if ev := open.event(t); ev.Outcome != core.OutcomeStoreError || ev.Err == nil {
			t.Fatalf("fail-open outcome = %v (%v), want store_error", ev.Outcome, ev.Err)
		}
	}
	if got := open.runs.Load() - runs; got != 3 {
		t.Errorf("fail-open ran the handler %d times, want 3 (unprotected)", got)
	}
	if w := closed.do(before); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("fail-closed: %d %v, want 503 with Retry-After", w.Code, w.Header())
	}
	if closed.runs.Load() != 0 {
		t.Error("fail-closed ran the handler")
	}

	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []*app{open, closed} {
		if w := a.do(before); w.Header().Get(core.HeaderReplay) != "true" {
			t.Fatalf("after the restart: %d %v, want a replay", w.Code, w.Header())
		}
	}
	key := testKey(t, 1)
	if w := closed.do(key); w.Code != http.StatusCreated {
		t.Fatalf("after the restart, first request: %d", w.Code)
	}
	if w := open.do(key); w.Header().Get(core.HeaderReplay) != "true" {
		t.Fatalf("after the restart, duplicate: %d %v, want a replay", w.Code, w.Header())
	}
}

// TestCorruptRecord puts something other than a record under a response
// key, no panic: a value that is not a record is refused under either
// policy (the key may have run: running it again could double it), a key
// of the wrong type is a store error and the policy applies.
func TestCorruptRecord(t *testing.T) {
	m, c := newMiniredis(t)
	store := mustNew(t, c, nil)
	open := newApp(t, store, core.Config{})
	closed := newApp(t, store, core.Config{FailClosed: true})
	// respKey runs a first request with key and returns the response key
	// it wrote.
	respKey := func(key string) string {
		before := map[string]bool{}
		for _, k := range m.Keys() {
			before[k] = true
		}
		open.do(key)
		open.drainEvents()
		for _, k := range m.Keys() {
			if !before[k] && strings.HasPrefix(k, redislock.DefaultPrefix+":{") {
				return k
			}
		}
		t.Fatal("no record written")
		return ""
	}
	tests := []struct {
		name    string
		corrupt func(resp string)
		want    error
		refused bool // 503 under fail-open too
	}{
		{"junk", func(resp string) { m.Set(resp, "not a record") }, core.ErrCorruptRecord, true},
		{"wrong type", func(resp string) { m.Del(resp); m.HSet(resp, "f", "v") }, nil, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := testKey(t, i)
			tt.corrupt(respKey(key))
			runs := open.runs.Load()
			wantCode, wantRuns := http.StatusCreated, runs+1
			if tt.refused {
				wantCode, wantRuns = http.StatusServiceUnavailable, runs
			}
			if w := open.do(key); w.Code != wantCode || open.runs.Load() != wantRuns {
				t.Fatalf("fail-open: %d, handler runs %d, want %d and %d runs", w.Code, open.runs.Load()-runs, wantCode, wantRuns-runs)
			}
			ev := open.event(t)
			if ev.Outcome != core.OutcomeStoreError || ev.Err == nil || (tt.want != nil && !errors.Is(ev.Err, tt.want)) {
				t.Fatalf("fail-open outcome = %v (%v), want store_error", ev.Outcome, ev.Err)
			}
			if w := closed.do(key); w.Code != http.StatusServiceUnavailable {
				t.Fatalf("fail-closed: %d, want 503", w.Code)
			}
		})
	}
}

// TestTimeout points the store at a server that never answers: the request
// gets its 503 after one attempt, timed out.
func TestTimeout(t *testing.T) {
	addr, accepted := countingBlackhole(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 50 * time.Millisecond,
		WriteTimeout: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	store := mustNew(t, c, nil)
	closed := newApp(t, store, core.Config{FailClosed: true})
	if w := closed.do(testKey(t, 0)); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("fail-closed on a timeout: %d", w.Code)
	}
	if ev := closed.event(t); ev.Outcome != core.OutcomeStoreError || !strings.Contains(ev.Err.Error(), "timeout") {
		t.Fatalf("outcome = %v (%v), want a store_error with a timeout", ev.Outcome, ev.Err)
	}
	// The kernel completes a connection before the blackhole's Accept
	// returns it: wait for the count to see the one the request made.
	for deadline := time.Now().Add(5 * time.Second); accepted.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("the timed-out request made %d connections, want 1: one attempt", n)
	}
	// The request's context bounds the call too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, _, err := store.Acquire(ctx, idemtest.Key(t), time.Minute); err == nil {
		t.Fatal("Acquire on a dead server: no error")
	}
}

// NewClient's clients honour a call's deadline (ContextTimeoutEnabled): a
// lock refresh, which the Engine bounds at a sixth of LockTTL, gives up
// then on a connection that stalled, not after the client's read_timeout
// (here an hour), which would let the lock expire while the handler runs.
func TestNewClientHonoursDeadline(t *testing.T) {
	c, err := redislock.NewClient("redis://" + blackhole(t) + "?read_timeout=1h&write_timeout=1h&max_retries=-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	store := mustNew(t, c, nil)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		done <- store.Refresh(ctx, idemtest.Key(t), "token", time.Minute)
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Refresh on a server that never answers: no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Refresh ignored its context's deadline")
	}

	// The other kinds of client too (no I/O: they connect lazily), unless
	// a sentinel URL says otherwise.
	for url, want := range map[string]bool{
		"redis+cluster://127.0.0.1:7000":                                               true,
		"redis+sentinel://127.0.0.1:26379?master_name=m":                               true,
		"redis+sentinel://127.0.0.1:26379?master_name=m&context_timeout_enabled=false": false,
	} {
		c, err := redislock.NewClient(url)
		if err != nil {
			t.Fatal(err)
		}
		var got bool
		switch c := c.(type) {
		case *redis.ClusterClient:
			got = c.Options().ContextTimeoutEnabled
		case *redis.Client:
			got = c.Options().ContextTimeoutEnabled
		}
		c.Close()
		if got != want {
			t.Errorf("%s: ContextTimeoutEnabled %v, want %v", url, got, want)
		}
	}
}

// Against a server that closes every connection it accepts (a proxy whose
// Redis is down), a script runs twice, not up to the bound: the second run
// finds no idle connection in the pool that could have been a stale one.
func TestClosedConnectionRunsTwice(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	var cnt counter
	c.AddHook(&cnt)
	_, _, err = mustNew(t, c, nil).Acquire(context.Background(), idemtest.Key(t), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "(2 runs)") {
		t.Fatalf("Acquire on a server that closes every connection: %v, want an error after 2 runs", err)
	}
	cnt.mu.Lock()
	runs := len(cnt.scripts)
	cnt.mu.Unlock()
	if runs != 2 {
		t.Fatalf("%d runs, want 2", runs)
	}
}

// lossyScripter runs scripts on Redis and, when lose is set, loses the
// reply of the next one, as a connection that dies after sending does.
type lossyScripter struct {
	redis.Scripter
	lose atomic.Bool
}

func (l *lossyScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return l.maybeLose(ctx, l.Scripter.EvalSha(ctx, sha, keys, args...))
}

func (l *lossyScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return l.maybeLose(ctx, l.Scripter.Eval(ctx, script, keys, args...))
}

// maybeLose replaces the reply of a script that ran with EOF, once, if
// lose is set.
func (l *lossyScripter) maybeLose(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	if cmd.Err() == nil && l.lose.CompareAndSwap(true, false) {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(io.EOF)
	}
	return cmd
}

// A script whose reply was lost after it ran is run again, and every
// script takes its own earlier run for what it is: Acquire gets its lock,
// Complete its record stored, Release its lock deleted (not a lost lock).
func TestScriptRunAgainAfterLostReply(t *testing.T) {
	m, c := newMiniredis(t)
	l := &lossyScripter{Scripter: c}
	s := mustNew(t, l, nil)
	ctx := context.Background()
	if _, _, err := s.Acquire(ctx, idemtest.Key(t)+"-warm", time.Minute); err != nil { // loads the scripts
		t.Fatal(err)
	}
	key := idemtest.Key(t)
	respKey, lockKey, _ := s.Keys(key)

	l.lose.Store(true)
	_, token, err := s.Acquire(ctx, key, time.Minute)
	if err != nil || token == "" {
		t.Fatalf("Acquire after a lost reply: token %q, %v", token, err)
	}
	if got, _ := m.Get(lockKey); got != token {
		t.Fatalf("lock holds %q, want the token %q", got, token)
	}
	l.lose.Store(true)
	if err := s.Complete(ctx, key, token, []byte("record"), time.Minute); err != nil {
		t.Fatalf("Complete after a lost reply: %v", err)
	}
	if got, _ := m.Get(respKey); got != "record" || m.Exists(lockKey) {
		t.Fatalf("after Complete: record %q, lock left %v", got, m.Exists(lockKey))
	}

	key = idemtest.Key(t) + "-release"
	_, lockKey, _ = s.Keys(key)
	if _, token, err = s.Acquire(ctx, key, time.Minute); err != nil {
		t.Fatal(err)
	}
	l.lose.Store(true)
	if err := s.Release(ctx, key, token); err != nil {
		t.Fatalf("Release after a lost reply: %v, want nil (it deleted the lock)", err)
	}
	if m.Exists(lockKey) {
		t.Fatal("the lock is still there")
	}
	// Without a lost reply, no lock to release is a lost lock, as before.
	if err := s.Release(ctx, key, token); !errors.Is(err, core.ErrLockLost) {
		t.Fatalf("Release of a lock that is gone: %v, want ErrLockLost", err)
	}
}

// TestNoGoroutineLeak sends many requests to a Redis that is down: the
// goroutine count must not grow with them.
func TestNoGoroutineLeak(t *testing.T) {
	m, c := newMiniredis(t)
	a := newApp(t, mustNew(t, c, nil), core.Config{LockTTL: 30 * time.Millisecond})
	a.do(testKey(t, 0))
	m.Close()
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.do(testKey(t, i))
		}()
	}
	wg.Wait()
	// The Engine's refresh timers fire at LockTTL/3 at most once more after
	// a flight ends; give them that long, then count.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+5 {
		t.Fatalf("%d goroutines after 200 failed requests, %d before", n, before)
	}
}

// TestWaitAcrossInstances runs two Engines on one Redis with Config.Wait:
// the duplicate polls until the first completes, then gets the replay.
func TestWaitAcrossInstances(t *testing.T) {
	_, c := newMiniredis(t)
	store := mustNew(t, c, nil)
	first := newApp(t, store, core.Config{})
	first.block, first.started = make(chan struct{}), make(chan struct{}, 1)
	second := newApp(t, store, core.Config{Wait: 10 * time.Second})

	key := testKey(t, 0)
	done := make(chan []byte)
	go func() { done <- first.do(key).Body.Bytes() }()
	<-first.started

	// Release the first request once the second has polled twice.
	var cnt counter
	var once sync.Once
	cnt.onCmd = func(cmd redis.Cmder) {
		if cnt.n.Load() >= 2 {
			once.Do(func() { close(first.block) })
		}
	}
	c.AddHook(&cnt)
	w := second.do(key)
	body := <-done
	if w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "true" || !bytes.Equal(w.Body.Bytes(), body) {
		t.Fatalf("waiting duplicate: %d %v %q, want the replay of %q", w.Code, w.Header(), w.Body, body)
	}
	if second.runs.Load() != 0 {
		t.Error("the waiting duplicate ran the handler")
	}
}

func TestNewClient(t *testing.T) {
	tests := []struct {
		url  string
		want string // the client's type and address, or "" for an error
	}{
		{"redis://127.0.0.1:6379/0", "*redis.Client 127.0.0.1:6379"},
		{"redis://user:pw@redis.example:6380/2?protocol=2&dial_timeout=1s", "*redis.Client redis.example:6380"},
		{"rediss://redis.example", "*redis.Client redis.example:6379"},
		{"unix:///run/redis.sock?db=1", "*redis.Client /run/redis.sock"},
		{"redis+cluster://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", "*redis.ClusterClient 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000"},
		{"rediss+cluster://10.0.0.1:7000", "*redis.ClusterClient 10.0.0.1:7000"},
		{"redis+sentinel://10.0.0.1:26379/0?master_name=mymaster&addr=10.0.0.2:26379", "*redis.Client sentinel"},
		{"redis+sentinel://10.0.0.1:26379", ""},
		{"http://127.0.0.1:6379", ""},
		{"unix+cluster:///run/redis.sock", ""},
		{"redis+ring://127.0.0.1", ""},
		{"127.0.0.1:6379", ""},
		{"redis://127.0.0.1:6379/x", ""},
		{"redis://127.0.0.1:6379?nonsense=1", ""},
	}
	for _, tt := range tests {
		c, err := redislock.NewClient(tt.url)
		if tt.want == "" {
			if err == nil || !strings.HasPrefix(err.Error(), "redislock: ") {
				t.Errorf("NewClient(%q): err = %v, want a redislock error", tt.url, err)
			}
			if c != nil {
				c.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("NewClient(%q): %v", tt.url, err)
			continue
		}
		var got string
		switch c := c.(type) {
		case *redis.ClusterClient:
			got = "*redis.ClusterClient " + strings.Join(c.Options().Addrs, ",")
		case *redis.Client:
			got = "*redis.Client " + c.Options().Addr
			if strings.Contains(tt.url, "sentinel") {
				got = "*redis.Client sentinel"
			}
		}
		if got != tt.want {
			t.Errorf("NewClient(%q) = %s, want %s", tt.url, got, tt.want)
		}
		c.Close()
	}
}

// A TLS client from NewClient gives up a handshake the server never
// answers after its dial timeout (go-redis's default, 5 s, unless the URL
// sets one; 300 ms here), the sentinel master's connections too: a TLS dial
// has no other deadline, and a stalled handshake would otherwise hold its
// request, and the pool's dial, for ever.
func TestNewClientTLSDialTimesOut(t *testing.T) {
	for _, stalled := range []string{"rediss", "rediss+cluster", "rediss+sentinel", "rediss+sentinel master"} {
		t.Run(stalled, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var url string
			switch stalled {
			case "rediss+sentinel":
				url = stalled + "://" + ln.Addr().String() + "/0?max_retries=-1&master_name=m&dial_timeout=300ms"
			case "rediss+sentinel master": // the sentinel answers, the master it names stalls
				url = "rediss+sentinel://" + fakeSentinel(t, ln.Addr().String()) + "/0?max_retries=-1&master_name=m&skip_verify=true&dial_timeout=300ms"
			default:
				url = stalled + "://" + ln.Addr().String() + "/0?max_retries=-1&dial_timeout=300ms"
			}
			c, err := redislock.NewClient(url)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go c.Ping(ctx)                                                      //nolint:errcheck // it fails: nobody answers
			ln.(*net.TCPListener).SetDeadline(time.Now().Add(15 * time.Second)) //nolint:errcheck
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ln.Close() // refuse the pool's later dials
			// Read the ClientHello and say nothing: the handshake stalls
			// until the client closes the connection.
			conn.SetReadDeadline(time.Now().Add(15 * time.Second)) //nolint:errcheck
			if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("the client still waits for its handshake after 15 s: %v", err)
			}
		})
	}
}

// Without dial_timeout in the URL, every kind of client gets go-redis's
// default of 5 s, the sentinel's master connections included.
func TestNewClientDefaultDialTimeout(t *testing.T) {
	for _, url := range []string{"rediss://127.0.0.1:1/0", "rediss+cluster://127.0.0.1:1", "rediss+sentinel://127.0.0.1:1/0?master_name=m"} {
		c, err := redislock.NewClient(url)
		if err != nil {
			t.Fatal(err)
		}
		var got time.Duration
		switch c := c.(type) {
		case *redis.ClusterClient:
			got = c.Options().DialTimeout
		case *redis.Client:
			got = c.Options().DialTimeout
		}
		c.Close()
		if got != 5*time.Second {
			t.Errorf("NewClient(%q): DialTimeout %v, want 5s", url, got)
		}
	}
}

// fakeSentinel serves, over TLS on a loopback port, just enough of Redis
// Sentinel for go-redis's failover client to ask it for the master, which
// it names master (host:port). It returns its address.
func fakeSentinel(t *testing.T, master string) string {
	t.Helper()
	srv := httptest.NewTLSServer(nil) // for a certificate
	certs := srv.TLS.Certificates
	srv.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	host, port, _ := net.SplitHostPort(master)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					var args []string // one command: an array of bulk strings
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
					for range n {
						r.ReadString('\n') //nolint:errcheck // the length
						arg, _ := r.ReadString('\n')
						args = append(args, strings.ToUpper(strings.TrimSpace(arg)))
					}
					switch cmd := strings.Join(args, " "); {
					case strings.HasPrefix(cmd, "SENTINEL GET-MASTER-ADDR-BY-NAME"):
						fmt.Fprintf(conn, "*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(host), host, len(port), port)
					case strings.HasPrefix(cmd, "SENTINEL"):
						io.WriteString(conn, "*0\r\n") //nolint:errcheck
					case strings.Contains(cmd, "SUBSCRIBE"): // no news
					default: // HELLO, CLIENT SETINFO, ...
						io.WriteString(conn, "-ERR unknown command\r\n") //nolint:errcheck
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
