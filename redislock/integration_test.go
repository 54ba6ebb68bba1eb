//go:build integration

package redislock_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/redislock"
	"github.com/idem-go/idem/redislock/redistest"
)

func TestIntegrationConformance(t *testing.T) {
	c, prefix := redistest.Client(t)
	t.Run("client", func(t *testing.T) {
		idemtest.TestStore(t, func(*testing.T) core.Store {
			return mustNew(t, c, &redislock.Options{Prefix: prefix})
		})
		idemtest.TestLease(t, func(*testing.T) core.Store {
			return mustNew(t, c, &redislock.Options{Prefix: prefix})
		})
		idemtest.TestQuota(t, func(*testing.T) core.Store {
			return mustNew(t, c, &redislock.Options{Prefix: prefix})
		})
	})
	t.Run("autopipeline", func(t *testing.T) {
		ap, err := c.AutoPipeline()
		if err != nil {
			t.Fatal(err)
		}
		idemtest.TestStore(t, func(*testing.T) core.Store {
			return mustNew(t, ap, &redislock.Options{Prefix: prefix})
		})
	})
}

// TestIntegrationQuotaRefreshKeepsSlot: a refresh moves the admitted lock's
// slot with the lock on a real Redis (quota_refresh.lua), in real time.
func TestIntegrationQuotaRefreshKeepsSlot(t *testing.T) {
	c, prefix := redistest.Client(t)
	testQuotaRefreshKeepsSlot(t, mustNew(t, c, &redislock.Options{Prefix: prefix}), time.Sleep) // the server's TTLs and TIME
}

// TestIntegrationTTLs reads the TTLs back with PTTL.
func TestIntegrationTTLs(t *testing.T) {
	ctx := context.Background()
	c, prefix := redistest.Client(t)
	s := mustNew(t, c, &redislock.Options{Prefix: prefix})
	key := idemtest.Key(t)
	resp, lock, _ := s.Keys(key)
	within := func(what string, got, want time.Duration) {
		t.Helper()
		if got > want || got < want-2*time.Second {
			t.Errorf("%s PTTL = %v, want %v (less at most 2s)", what, got, want)
		}
	}

	_, token, err := s.Acquire(ctx, key, 90*time.Second)
	if err != nil || token == "" {
		t.Fatalf("Acquire = %q, %v", token, err)
	}
	if got := c.Get(ctx, lock).Val(); got != token {
		t.Errorf("lock key holds %q, want the token %q", got, token)
	}
	within("lock", c.PTTL(ctx, lock).Val(), 90*time.Second)
	if err := s.Refresh(ctx, key, token, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	within("refreshed lock", c.PTTL(ctx, lock).Val(), 5*time.Minute)
	if err := s.Complete(ctx, key, token, []byte("rec"), 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	within("record", c.PTTL(ctx, resp).Val(), 72*time.Hour)
	if n := c.Exists(ctx, lock).Val(); n != 0 {
		t.Error("lock key still there after Complete")
	}

	// Through the Engine: Config.TTL sets the record's TTL per request.
	a := newApp(t, s, core.Config{TTL: func(*core.Request) time.Duration { return 72 * time.Hour }})
	a.do(testKey(t, 0))
	keys, _ := c.Keys(ctx, prefix+":{*").Result()
	for _, k := range keys {
		if k != resp {
			within("record via the Engine", c.PTTL(ctx, k).Val(), 72*time.Hour)
		}
	}
	if len(keys) != 2 {
		t.Errorf("%d records under the prefix, want 2", len(keys))
	}

	// The longest TTLs a Config accepts (math.MaxInt64, 292 years) do not
	// wrap around to a millisecond.
	long := idemtest.Key(t)
	resp, lock, _ = s.Keys(long)
	longest := int64(math.MaxInt64 / time.Millisecond)
	pttl := func(what, key string) {
		t.Helper()
		if ms, err := c.Do(ctx, "PTTL", key).Int64(); err != nil || ms < longest-60_000 {
			t.Errorf("%s PTTL = %d ms, %v; want about %d", what, ms, err, longest)
		}
	}
	if _, token, err = s.Acquire(ctx, long, math.MaxInt64); err != nil || token == "" {
		t.Fatalf("Acquire for math.MaxInt64 = %q, %v", token, err)
	}
	pttl("lock", lock)
	if err := s.Refresh(ctx, long, token, math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	pttl("refreshed lock", lock)
	if err := s.Complete(ctx, long, token, []byte("rec"), math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	pttl("record", resp)
}

// TestIntegrationTakeoverFenced takes a running request's lock over (its
// lock key deleted, as if it had expired): the takeover completes, the late
// completion is fenced.
func TestIntegrationTakeoverFenced(t *testing.T) {
	ctx := context.Background()
	c, prefix := redistest.Client(t)
	store := mustNew(t, c, &redislock.Options{Prefix: prefix})
	slow := newApp(t, store, core.Config{})
	slow.block, slow.started = make(chan struct{}), make(chan struct{}, 1)
	fast := newApp(t, store, core.Config{})
	fast.runs.Store(100)

	key := testKey(t, 0)
	done := make(chan struct{})
	go func() { slow.do(key); close(done) }()
	<-slow.started
	locks, _ := c.Keys(ctx, prefix+"-lock:{*").Result()
	if len(locks) != 1 {
		t.Fatalf("%d locks, want 1", len(locks))
	}
	c.Del(ctx, locks[0]) // the lock expires

	w := fast.do(key)
	if w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "" {
		t.Fatalf("takeover: %d %v", w.Code, w.Header())
	}
	close(slow.block)
	<-done
	if ev := slow.event(t); ev.Outcome != core.OutcomeLockLost {
		t.Fatalf("late completion: %v (%v), want lock_lost", ev.Outcome, ev.Err)
	}
	if r := fast.do(key); !bytes.Equal(r.Body.Bytes(), w.Body.Bytes()) {
		t.Fatalf("replay = %q, want the takeover's %q", r.Body, w.Body)
	}
}

// TestIntegrationRoundTrips counts round trips on a real Redis.
func TestIntegrationRoundTrips(t *testing.T) {
	c, prefix := redistest.Client(t)
	var cnt counter
	c.AddHook(&cnt)
	a := newApp(t, mustNew(t, c, &redislock.Options{Prefix: prefix}), core.Config{})
	a.do(testKey(t, 0)) // warm-up: load the scripts
	a.do(testKey(t, 0))
	cnt.take()
	for i := 1; i <= 20; i++ {
		key := testKey(t, i)
		a.do(key)
		if n := cnt.take(); n != 2 {
			t.Fatalf("first request: %d round trips, want 2", n)
		}
		a.do(key)
		if n := cnt.take(); n != 1 {
			t.Fatalf("replay: %d round trips, want 1", n)
		}
	}
}

// TestIntegrationBatchedRoundTrips counts what the store sends when it
// batches: the same commands and round trips per request as without when
// requests come one at a time, and concurrent requests' commands sharing
// round trips.
func TestIntegrationBatchedRoundTrips(t *testing.T) {
	c, prefix := redistest.Client(t)
	cnt := new(counter)
	c.AddHook(cnt)
	a := newApp(t, mustNew(t, c, &redislock.Options{Prefix: prefix}), core.Config{})
	a.do(testKey(t, 0)) // warm-up: load the scripts
	var key string
	for i := 1; i <= 5; i++ {
		key = testKey(t, i)
		cnt.takeCommands()
		a.do(key)
		if cmds, trips := cnt.takeCommands(); cmds != 2 || trips != 2 {
			t.Fatalf("first request: %d commands in %d round trips, want 2 in 2", cmds, trips)
		}
		a.do(key)
		if cmds, trips := cnt.takeCommands(); cmds != 1 || trips != 1 {
			t.Fatalf("replay: %d commands in %d round trips, want 1 in 1", cmds, trips)
		}
	}

	// How many of the concurrent replays meet in a batch is up to the
	// scheduler (testBatching makes them meet): the round trips are only
	// logged.
	const n = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if w := a.do(key); w.Header().Get(core.HeaderReplay) != "true" {
				t.Errorf("concurrent replay: %d", w.Code)
			}
		}()
	}
	close(start)
	wg.Wait()
	cmds, trips := cnt.takeCommands()
	if cmds != n {
		t.Fatalf("%d concurrent replays: %d commands in %d round trips, want %d commands", n, cmds, trips, n)
	}
	t.Logf("%d concurrent replays: %d commands in %d round trips", n, cmds, trips)
}

// TestIntegrationExactlyOnceAcrossProcesses runs three API processes on one
// Redis and sends each of 50 keys 20 times at once, spread over the three:
// with the store batching its scripts (the default), and without.
func TestIntegrationExactlyOnceAcrossProcesses(t *testing.T) {
	bin := buildTestServer(t)
	t.Run("batched", func(t *testing.T) { testExactlyOnce(t, bin) })
	t.Run("unbatched", func(t *testing.T) { testExactlyOnce(t, bin, "-unbatched") })
}

func testExactlyOnce(t *testing.T, bin string, flags ...string) {
	const keys, dups = 50, 20
	c, prefix := redistest.Client(t)
	counterKey := prefix + ":count"
	var urls []string
	for i := range 3 {
		args := append([]string{"-redis", "redis://" + redistest.Addr(), "-prefix", prefix,
			"-counter", counterKey, "-name", "s" + strconv.Itoa(i)}, flags...)
		urls = append(urls, startTestServer(t, bin, args...))
	}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: keys * dups}}
	t.Cleanup(client.CloseIdleConnections)
	type result struct {
		status int
		replay bool
		body   []byte
		err    error
	}
	post := func(url, key string) result {
		req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"item":"book","qty":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return result{err: err}
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return result{status: resp.StatusCode, replay: resp.Header.Get(core.HeaderReplay) == "true", body: body, err: err}
	}

	results := make([][]result, keys)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range keys {
		results[k] = make([]result, dups)
		key := fmt.Sprintf("order-%s-%d", prefix, k)
		for d := range dups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[k][d] = post(urls[(k+d)%len(urls)], key)
			}()
		}
	}
	close(start)
	wg.Wait()

	runs, err := c.Get(context.Background(), counterKey).Int()
	if err != nil || runs != keys {
		t.Fatalf("the handler ran %d times (%v), want exactly %d", runs, err, keys)
	}
	var conflicts, replays int
	for k, rs := range results {
		var first []byte
		for _, r := range rs {
			switch {
			case r.err != nil:
				t.Fatalf("key %d: %v", k, r.err)
			case r.status == http.StatusConflict:
				conflicts++
			case r.status != http.StatusCreated:
				t.Fatalf("key %d: status %d %q, want 201 or 409", k, r.status, r.body)
			case !r.replay:
				if first != nil {
					t.Fatalf("key %d: two responses not marked as replays", k)
				}
				first = r.body
			}
		}
		if first == nil {
			t.Fatalf("key %d: no first response", k)
		}
		// Every 201 is the first one, byte for byte; a late duplicate too.
		rs = append(rs, post(urls[k%len(urls)], fmt.Sprintf("order-%s-%d", prefix, k)))
		for _, r := range rs {
			if r.status == http.StatusCreated && !bytes.Equal(r.body, first) {
				t.Fatalf("key %d: a response %q differs from the first %q", k, r.body, first)
			}
			if r.replay {
				replays++
			}
		}
	}
	t.Logf("%d requests: %d handler runs, %d conflicts (409), %d replays", keys*dups+keys, runs, conflicts, replays)
}

func buildTestServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testserver")
	cmd := exec.Command("go", "build", "-o", bin, "./internal/testserver")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startTestServer starts bin and returns its base URL once it listens.
func startTestServer(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", filepath.Base(bin), stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(l, "listening on ")
		if !ok {
			t.Fatalf("test server said %q", l)
		}
		return "http://" + addr
	case <-time.After(30 * time.Second):
		t.Fatal("test server did not start")
		return ""
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// redisServer is a redis-server process of the test's own.
type redisServer struct {
	t    testing.TB
	port int
	args []string
	dir  string
	cmd  *exec.Cmd
	out  bytes.Buffer
}

// startRedisServer runs redis-server on a free loopback port, without
// persistence, and waits until it answers PING. t.Cleanup stops it.
func startRedisServer(t testing.TB, args ...string) *redisServer {
	t.Helper()
	r := &redisServer{t: t, port: freePort(t), args: args, dir: t.TempDir()}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// client returns a client of NewClient's defaults on the server, closed
// by t.Cleanup.
func (r *redisServer) client(t *testing.T) redis.UniversalClient {
	t.Helper()
	c, err := redislock.NewClient("redis://" + r.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (r *redisServer) start() {
	r.t.Helper()
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", r.dir, "--daemonize", "no"}, r.args...)
	r.cmd = exec.Command("redis-server", args...)
	r.out.Reset()
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not start:\n%s", r.addr(), r.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) stop() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

// TestIntegrationFaults runs traffic through fail-open and fail-closed
// apps on a redis-server of its own, stops that server mid-traffic and
// starts it again: with the store batching its scripts (the default), and
// without.
func TestIntegrationFaults(t *testing.T) {
	t.Run("batched", func(t *testing.T) { testFaults(t, false) })
	t.Run("unbatched", func(t *testing.T) { testFaults(t, true) })
}

func testFaults(t *testing.T, unbatched bool) {
	srv := startRedisServer(t)
	// go-redis's defaults otherwise; no retries, so the test is quick.
	client, err := redislock.NewClient("redis://" + srv.addr() + "?max_retries=-1&dial_timeout=500ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	store := mustNew(t, client, &redislock.Options{DisableBatching: unbatched})
	open := newApp(t, store, core.Config{})
	closed := newApp(t, store, core.Config{FailClosed: true})

	// Traffic: fresh keys and duplicates through both apps until stopped.
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		statuses sync.Map // status code -> *atomic.Int64
		sent     atomic.Int64
		progress = make(chan struct{}, 1<<15) // one per response
	)
	// traffic waits for n more responses of the traffic.
	traffic := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-progress:
			case <-time.After(10 * time.Second):
				t.Fatal("traffic stalled")
			}
		}
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := open
				if w%2 == 1 {
					a = closed
				}
				key := fmt.Sprintf("traffic-%d-%d", w, i/2) // each key twice
				code := a.do(key).Code
				n, _ := statuses.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
				if sent.Add(1) > 20000 {
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})

	key := testKey(t, 0)
	if w := closed.do(key); w.Code != http.StatusCreated {
		t.Fatalf("before the outage: %d", w.Code)
	}
	if w := open.do(key); w.Header().Get(core.HeaderReplay) != "true" {
		t.Fatalf("before the outage: %d, want a replay", w.Code)
	}

	traffic(200)
	srv.stop() // mid-traffic
	for len(progress) > 0 {
		<-progress
	}
	traffic(8) // responses during the outage
	open.drainEvents()
	runs := open.runs.Load()
	start := time.Now()
	w := open.do(key)
	outage := time.Since(start)
	if w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "" || open.runs.Load() == runs {
		t.Fatalf("fail-open during the outage: %d %v, want the handler's own 201", w.Code, w.Header())
	}
	var sawErr bool
	for !sawErr {
		ev := open.event(t)
		sawErr = ev.Outcome == core.OutcomeStoreError && ev.Err != nil
		if sawErr {
			t.Logf("fail-open reported: %v (request took %v)", ev.Err, outage)
		}
	}
	closedRuns := closed.runs.Load()
	if w := closed.do(testKey(t, 1)); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("fail-closed during the outage: %d, want 503", w.Code)
	}
	if closed.runs.Load() != closedRuns {
		t.Error("fail-closed ran the handler during the outage")
	}

	srv.start() // same port, empty: no persistence
	deadline := time.Now().Add(10 * time.Second)
	key = testKey(t, 2)
	for {
		w := closed.do(key)
		if w.Code == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("protection did not resume: %d", w.Code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The fail-open app's breaker may still be open for its cooldown
	// (50 ms): probe it with fresh keys until one replays, then the key
	// the fail-closed app stored replays on both.
	for i := 0; ; i++ {
		probe := testKey(t, 1000+i)
		open.do(probe)
		if w := open.do(probe); w.Header().Get(core.HeaderReplay) == "true" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fail-open app did not resume protection")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, a := range []*app{open, closed} {
		if w := a.do(key); w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "true" {
			t.Fatalf("after the restart: %d %v, want a replay", w.Code, w.Header())
		}
	}
	traffic(200)
	close(stop)
	wg.Wait()
	var summary []string
	statuses.Range(func(k, v any) bool {
		code := k.(int)
		if code != http.StatusCreated && code != http.StatusConflict && code != http.StatusServiceUnavailable {
			t.Errorf("traffic got status %d", code)
		}
		summary = append(summary, fmt.Sprintf("%d×%d", v.(*atomic.Int64).Load(), code))
		return true
	})
	t.Logf("traffic: %s", strings.Join(summary, " "))
}

// TestIntegrationClosedConnections has Redis close every connection of
// the pool while it is idle, as a restart does, or its timeout setting, a
// proxy or a failover: the next requests must find those connections dead
// before sending on them (go-redis's pool health check, which NewClient
// keeps), not fail with EOF while Redis is up. Fail-open would run them
// unprotected, and their retries would run the handler again.
func TestIntegrationClosedConnections(t *testing.T) {
	srv := startRedisServer(t)
	// NewClient's defaults, but a pool that holds the 20 connections
	// killPool kills: the default is 10 per GOMAXPROCS, 10 on one CPU.
	client, err := redislock.NewClient("redis://" + srv.addr() + "?pool_size=" + strconv.Itoa(closedConnsPool))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { admin.Close() })
	testClosedConnections(t, client, admin)
}

// TestIntegrationClosedConnectionsTLS is TestIntegrationClosedConnections
// over TLS, where go-redis does not look at a pooled connection before it
// sends on it: the store runs a script again when it meets a connection
// that Redis had closed, so the requests still run once and replay.
func TestIntegrationClosedConnectionsTLS(t *testing.T) {
	client, admin := tlsRedis(t, "pool_size="+strconv.Itoa(closedConnsPool))
	testClosedConnections(t, client, admin)
}

// closedConnsPool is the pool of testClosedConnections's clients: room for
// the 20 connections it kills, whatever the machine's CPUs.
const closedConnsPool = 32

// testClosedConnections has admin kill 20 idle connections of client's
// pool, more than max_retries+1 (4), then sends 10 keys twice each: every
// key must run once and replay, without a store error.
func testClosedConnections(t *testing.T, client redis.UniversalClient, admin *redis.Client) {
	a := newApp(t, mustNew(t, client, nil), core.Config{})
	killPool(t, client, admin, 20)
	for i := range 10 {
		key := testKey(t, i)
		first, again := a.do(key), a.do(key)
		if first.Code != http.StatusCreated || again.Header().Get(core.HeaderReplay) != "true" {
			t.Fatalf("key %d: %d then %d (replay %q), want 201 then its replay",
				i, first.Code, again.Code, again.Header().Get(core.HeaderReplay))
		}
		for range 2 {
			if ev := a.event(t); ev.Outcome == core.OutcomeStoreError {
				t.Fatalf("key %d: store error: %v", i, ev.Err)
			}
		}
	}
	if n := a.runs.Load(); n != 10 {
		t.Fatalf("handler ran %d times for 10 keys", n)
	}
}

// TestIntegrationClosedConnectionsBounded kills more pooled TLS
// connections than 8 runs of a script get past (7 runs of 4 attempts): the
// call fails after 8 runs, saying so, and the next one gets past the rest.
func TestIntegrationClosedConnectionsBounded(t *testing.T) {
	client, admin := tlsRedis(t, "pool_size=64")
	killPool(t, client, admin, 40)
	var cnt counter
	client.AddHook(&cnt)
	store := mustNew(t, client, nil)
	_, _, err := store.Acquire(context.Background(), idemtest.Key(t), time.Minute)
	cnt.mu.Lock()
	runs := len(cnt.scripts)
	cnt.mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "(8 runs)") || runs != 8 {
		t.Fatalf("Acquire past 40 dead connections: %v after %d runs, want an error after 8", err, runs)
	}
	if _, token, err := store.Acquire(context.Background(), idemtest.Key(t)+"-next", time.Minute); err != nil || token == "" {
		t.Fatalf("the next Acquire: token %q, %v", token, err)
	}
}

// tlsRedis starts a redis-server of its own with TLS and returns a client
// of NewClient on its TLS port (options: more URL query options) and an
// admin client on its plain port.
func tlsRedis(t *testing.T, options string) (client redis.UniversalClient, admin *redis.Client) {
	t.Helper()
	cert, key := selfSignedCert(t)
	tlsPort := freePort(t)
	srv := startRedisServer(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert,
		"--tls-key-file", key, "--tls-ca-cert-file", cert, "--tls-auth-clients", "no")
	client, err := redislock.NewClient(fmt.Sprintf("rediss://127.0.0.1:%d?skip_verify=true&%s", tlsPort, options))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	admin = redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { admin.Close() })
	return client, admin
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key as PEM
// files, and returns their paths.
func selfSignedCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for file, block := range map[string]*pem.Block{
		certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// killPool leaves n idle connections in client's pool, and has admin, a
// client of the same server, close them from the server's side.
func killPool(t *testing.T, client redis.UniversalClient, admin *redis.Client, n int) {
	t.Helper()
	fillPool(t, client.(*redis.Client), n)
	killed, err := admin.ClientKillByFilter(context.Background(), "TYPE", "normal", "SKIPME", "yes").Result()
	if err != nil || killed < int64(n) {
		t.Fatalf("CLIENT KILL: %d killed, %v", killed, err)
	}
}

// fillPool leaves n idle connections in c's pool.
func fillPool(t testing.TB, c *redis.Client, n int) {
	t.Helper()
	if size := c.Options().PoolSize; n > size {
		// c.Conn would wait out the pool timeout for the connection past it.
		t.Fatalf("fillPool: %d idle connections wanted, the pool holds %d", n, size)
	}
	ctx := context.Background()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = c.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cn := range conns {
		cn.Close()
	}
	if got := c.PoolStats().IdleConns; got < uint32(n) {
		t.Fatalf("%d idle connections in the pool, want %d", got, n)
	}
}

// TestIntegrationReadOnlyReplica points the store at a replica, as a
// client may be after a failover: the write is refused with READONLY and
// the policy applies.
func TestIntegrationReadOnlyReplica(t *testing.T) {
	primary := startRedisServer(t)
	replica := startRedisServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	client, err := redislock.NewClient("redis://" + replica.addr() + "?max_retries=-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	store := mustNew(t, client, nil)
	_, _, err = store.Acquire(context.Background(), idemtest.Key(t), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Acquire on a replica: %v, want READONLY", err)
	}
	open := newApp(t, store, core.Config{})
	closed := newApp(t, store, core.Config{FailClosed: true})
	if w := open.do(testKey(t, 0)); w.Code != http.StatusCreated {
		t.Fatalf("fail-open on a replica: %d", w.Code)
	}
	if ev := open.event(t); ev.Outcome != core.OutcomeStoreError {
		t.Fatalf("fail-open on a replica: %v, want store_error", ev.Outcome)
	}
	if w := closed.do(testKey(t, 1)); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("fail-closed on a replica: %d, want 503", w.Code)
	}
}

// startCluster starts a Redis Cluster of n masters and no replicas, and
// returns their addresses once every node agrees the cluster is up.
func startCluster(ctx context.Context, t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		dir := t.TempDir()
		srv := startRedisServer(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(freePort(t)),
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000")
		addrs = append(addrs, srv.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs { // wait until every node agrees the cluster is up
		c := redis.NewClient(&redis.Options{Addr: a})
		for !strings.Contains(c.ClusterInfo(ctx).Val(), "cluster_state:ok") {
			if ctx.Err() != nil {
				t.Fatalf("cluster not ok on %s", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return addrs
}

// clusterClient returns a client of the Cluster at addrs, once it answers.
func clusterClient(ctx context.Context, t *testing.T, addrs []string) *redis.ClusterClient {
	t.Helper()
	client, err := redislock.NewClient("redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	cc := client.(*redis.ClusterClient)
	for cc.Ping(ctx).Err() != nil && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	return cc
}

// TestIntegrationClusterMigratingSlot moves the slot of a request's keys
// from one master to another while the request runs. Redis refuses a
// script of several keys in a slot being migrated (TRYAGAIN) unless every
// key is on the node asked, which never holds for acquire.lua: the record
// and the lock never both exist. So every request of that slot fails for
// the length of the migration, which the Store waits out within the
// call's deadline rather than fail (fail-open would run the handler
// unprotected, replays of completed keys included).
func TestIntegrationClusterMigratingSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs := startCluster(ctx, t, 3)

	for _, run := range []string{"first request", "replay"} {
		t.Run(run, func(t *testing.T) {
			cc := clusterClient(ctx, t, addrs)
			moving := movingHook{seen: make(chan struct{}), once: new(sync.Once)}
			cc.AddHook(moving)
			s := mustNew(t, cc, nil)
			key := idemtest.Key(t)
			resp, _, _ := s.Keys(key)
			if run == "replay" {
				_, token, err := s.Acquire(ctx, key, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Complete(ctx, key, token, []byte("record"), time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			slot := cc.ClusterKeySlot(ctx, resp).Val()
			master, err := cc.MasterForKey(ctx, resp)
			if err != nil {
				t.Fatal(err)
			}
			src := master.Options().Addr
			dst := addrs[0]
			if dst == src {
				dst = addrs[1]
			}
			node := func(addr string) *redis.Client {
				c := redis.NewClient(&redis.Options{Addr: addr})
				t.Cleanup(func() { c.Close() })
				return c
			}
			srcc, dstc := node(src), node(dst)
			srcID, dstID := srcc.ClusterMyID(ctx).Val(), dstc.ClusterMyID(ctx).Val()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(dstc.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err())
			must(srcc.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err())

			// The migration ends once the Store has been told the slot is
			// moving: the keys move, then the slot.
			done := make(chan error, 1)
			go func() {
				select {
				case <-moving.seen:
				case <-ctx.Done():
				}
				keys, err := srcc.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
				if err == nil && len(keys) > 0 {
					args := []any{"migrate", "127.0.0.1", strings.TrimPrefix(dst, "127.0.0.1:"), "", 0, 5000, "keys"}
					for _, k := range keys {
						args = append(args, k)
					}
					err = srcc.Do(ctx, args...).Err()
				}
				for _, c := range []*redis.Client{dstc, srcc} {
					if err == nil {
						err = c.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err()
					}
				}
				done <- err
			}()

			actx, acancel := context.WithTimeout(ctx, 10*time.Second)
			defer acancel()
			record, token, err := s.Acquire(actx, key, time.Minute)
			if err != nil {
				t.Fatalf("Acquire while its slot migrates: %v", err)
			}
			if run == "replay" && string(record) != "record" {
				t.Fatalf("Acquire of a completed key while its slot migrates: %q, %q", record, token)
			}
			if run == "first request" && token == "" {
				t.Fatalf("Acquire of a new key while its slot migrates: %q, no token", record)
			}
			must(<-done)
		})
	}
}

// TestIntegrationCluster starts a Redis Cluster of three masters and runs
// the conformance suite on it: every script touches both keys of a
// request, which a Cluster refuses (CROSSSLOT) unless they share a slot.
func TestIntegrationCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs := startCluster(ctx, t, 3)
	cc := clusterClient(ctx, t, addrs)

	// Both keys of a request share a slot; requests spread over the masters.
	s := mustNew(t, cc, nil)
	slots := map[int64]bool{}
	for range 30 {
		resp, lock, _ := s.Keys(idemtest.Key(t))
		rs, ls := cc.ClusterKeySlot(ctx, resp).Val(), cc.ClusterKeySlot(ctx, lock).Val()
		if rs != ls {
			t.Fatalf("%s in slot %d, %s in slot %d", resp, rs, lock, ls)
		}
		slots[rs] = true
	}
	if len(slots) < 20 {
		t.Errorf("30 keys in %d slots: the hash tag does not spread them", len(slots))
	}

	t.Run("conformance", func(t *testing.T) {
		idemtest.TestStore(t, func(t *testing.T) core.Store { return mustNew(t, cc, nil) })
	})
	t.Run("lease", func(t *testing.T) { // concurrent calls of one key through the Engine: Acquire, Once, Do, Step
		idemtest.TestLease(t, func(t *testing.T) core.Store { return mustNew(t, cc, nil) })
	})
	t.Run("quota", func(t *testing.T) { // the scope's keys in another slot than the request's
		idemtest.TestQuota(t, func(t *testing.T) core.Store { return mustNew(t, cc, nil) })
	})
	t.Run("admin", func(t *testing.T) { // InFlight SCANs every master
		idemtest.TestAdmin(t, func(t *testing.T) core.Store {
			return mustNew(t, cc, &redislock.Options{Prefix: "admin" + idemtest.Key(t)[:8]})
		})
	})
	t.Run("conformance-unbatched", func(t *testing.T) {
		idemtest.TestStore(t, func(*testing.T) core.Store {
			return mustNew(t, cc, &redislock.Options{DisableBatching: true})
		})
	})
	t.Run("batcher-per-master", func(t *testing.T) {
		// A hook holds the scripts of two requests whose keys one master
		// holds: as many batches as the store sends to a node at once. A
		// request whose keys another master holds is not held up by them.
		c, err := redislock.NewClient("redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cc := c.(*redis.ClusterClient)
		s := mustNew(t, c, nil)
		master := func(key string) string {
			resp, _, _ := s.Keys(key)
			node, err := cc.MasterForKey(ctx, resp)
			if err != nil {
				t.Fatal(err)
			}
			return node.Options().Addr
		}
		var held, other []string
		for i := 0; len(held) < 2 || len(other) < 1; i++ {
			key := idemtest.Key(t) + strconv.Itoa(i)
			switch {
			case len(held) == 0 || master(key) == master(held[0]):
				held = append(held, key)
			default:
				other = append(other, key)
			}
		}
		entered, release := make(chan struct{}), make(chan struct{})
		cc.AddHook(holdHook{keys: held, entered: entered, release: release, held: new(sync.Map)})
		done := make(chan error, len(held))
		for _, key := range held[:2] {
			go func() {
				_, _, err := s.Acquire(ctx, key, time.Minute)
				done <- err
			}()
			<-entered
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, token, err := s.Acquire(actx, other[0], time.Minute); err != nil || token == "" {
			t.Errorf("Acquire on another master while two are held: %q, %v", token, err)
		}
		close(release)
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("held Acquire: %v", err)
			}
		}
	})
	t.Run("engine", func(t *testing.T) {
		a := newApp(t, s, core.Config{})
		for i := range 20 {
			key := testKey(t, i)
			if w := a.do(key); w.Code != http.StatusCreated {
				t.Fatalf("first request: %d", w.Code)
			}
			if w := a.do(key); w.Header().Get(core.HeaderReplay) != "true" {
				t.Fatalf("duplicate: %d, want a replay", w.Code)
			}
		}
		if a.runs.Load() != 20 {
			t.Fatalf("%d runs, want 20", a.runs.Load())
		}
	})
	// A layout without the shared tag would fail on a Cluster: Redis refuses
	// a script whose keys hash to two slots.
	err := cc.Eval(ctx, "return 1", []string{"idempotency:a", "idempotency-lock:a"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("cross-slot script: %v, want CROSSSLOT", err)
	}
}

// movingHook closes seen once a command gets a Cluster's answer about a
// slot being migrated (TRYAGAIN, MOVED, ASK), as the Store sees it.
type movingHook struct {
	seen chan struct{}
	once *sync.Once
}

func (h movingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h movingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(cmd.Err())
		return err
	}
}

func (h movingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.note(cmd.Err())
		}
		return err
	}
}

func (h movingHook) note(err error) {
	if redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
		h.once.Do(func() { close(h.seen) })
	}
}

// holdHook is a go-redis hook that holds the first script on each of keys
// (the Engine's store keys, as given to the Store) until release is closed.
type holdHook struct {
	keys             []string
	entered, release chan struct{}
	held             *sync.Map
}

func (h holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold(cmd)
		return next(ctx, cmd)
	}
}

func (h holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.hold(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h holdHook) hold(cmd redis.Cmder) {
	if args := cmd.Args(); len(args) > 3 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
		for _, k := range h.keys {
			if !strings.Contains(fmt.Sprint(args[3]), "{"+k+"}") {
				continue
			}
			if _, again := h.held.LoadOrStore(k, true); !again {
				h.entered <- struct{}{}
				<-h.release
			}
			return
		}
	}
}

// takeCommands returns the commands and round trips since the last call to
// it or take, and resets both counts.
func (c *counter) takeCommands() (cmds, trips int64) {
	c.mu.Lock()
	c.scripts = nil
	c.mu.Unlock()
	return c.cmds.Swap(0), c.n.Swap(0)
}

// TestIntegrationPurgeWithoutPublishRight purges as an ACL user that may
// use the keys but not publish to the purge channel (a new user's default
// since Redis 7, acl-pubsub-default resetchannels): Purge deletes the
// record, and its error says so and why the replay caches were not told,
// rather than reading as a purge that changed nothing.
func TestIntegrationPurgeWithoutPublishRight(t *testing.T) {
	ctx := context.Background()
	srv := startRedisServer(t)
	if err := srv.client(t).Do(ctx, "ACL", "SETUSER", "ops", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	client, err := redislock.NewClient("redis://ops:pw@" + srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	store := mustNew(t, client, nil)
	_, token, err := store.Acquire(ctx, "k", time.Minute)
	if err != nil || token == "" {
		t.Fatalf("Acquire: %q, %v", token, err)
	}
	if err := store.Complete(ctx, "k", token, []byte("record"), time.Hour); err != nil {
		t.Fatal(err)
	}
	err = store.Purge(ctx, "k")
	if err == nil || !strings.Contains(err.Error(), "record deleted") || !strings.Contains(err.Error(), "publish") {
		t.Fatalf("Purge without the right to publish: %v; want an error saying the record was deleted and not published", err)
	}
	if st, err := store.Inspect(ctx, "k"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Inspect after the purge: %+v, %v; want ErrNotFound", st, err)
	}
	if err := store.Purge(ctx, "k"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Purge again: %v; want ErrNotFound", err)
	}
}

// TestIntegrationDocumentedACL runs the store as an ACL user with the
// rights docs/redis.md lists, and no more: every operation works, Purge of
// a key in flight included (bsm/redislock's obtain reads the lock held
// with GETRANGE).
func TestIntegrationDocumentedACL(t *testing.T) {
	ctx := context.Background()
	srv := startRedisServer(t)
	if err := srv.client(t).Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~idempotency*", "&idempotency:purged", "+@scripting",
		"+get", "+set", "+del", "+pexpire", "+pttl", "+getrange", "+hset", "+hgetall", "+time",
		"+zadd", "+zcard", "+zrange", "+zrem", "+zremrangebyscore", "+zscore", "+scan", "+info", "+subscribe", "+publish").Err(); err != nil {
		t.Fatal(err)
	}
	client, err := redislock.NewClient("redis://app:pw@" + srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	t.Run("conformance", func(t *testing.T) {
		idemtest.TestStore(t, func(t *testing.T) core.Store { return mustNew(t, client, nil) })
	})
	t.Run("lease", func(t *testing.T) {
		idemtest.TestLease(t, func(t *testing.T) core.Store { return mustNew(t, client, nil) })
	})
	t.Run("quota", func(t *testing.T) {
		idemtest.TestQuota(t, func(t *testing.T) core.Store { return mustNew(t, client, nil) })
	})

	store := mustNew(t, client, nil)
	purged := make(chan string, 1)
	store.SetInvalidate(func(key string) { purged <- key })
	t.Cleanup(func() { store.Close() })
	_, token, err := store.Acquire(ctx, "acl", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Purge(ctx, "acl"); !errors.Is(err, core.ErrInFlight) {
		t.Errorf("Purge of a key in flight: %v, want ErrInFlight", err)
	}
	if st, err := store.InFlight(ctx, 10); err != nil || len(st) == 0 {
		t.Errorf("InFlight: %v, %v", st, err)
	}
	if _, err := store.RunID(ctx, "acl"); err != nil {
		t.Errorf("RunID: %v", err)
	}
	if err := store.Complete(ctx, "acl", token, []byte("record"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Inspect(ctx, "acl"); err != nil {
		t.Errorf("Inspect: %v", err)
	}
	// Purges until one reaches SetInvalidate's subscription, which starts in
	// the background.
	for i, deadline := 0, time.Now().Add(5*time.Second); ; i++ {
		key := "acl"
		if i > 0 {
			key = fmt.Sprint("acl", i)
			if _, token, err = store.Acquire(ctx, key, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := store.Complete(ctx, key, token, []byte("record"), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if err := store.Purge(ctx, key); err != nil {
			t.Fatalf("Purge: %v", err)
		}
		select {
		case <-purged:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no purge published to SetInvalidate's subscription")
		}
	}
}
