package redislock_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

// newMiniredis starts a miniredis and returns it with a client. miniredis
// expires keys only when told to (FastForward).
func newMiniredis(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	// No retries: a test that stops Redis gets its errors at once.
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return m, c
}

// counter is a go-redis hook counting round trips (every command alone and
// every pipeline is one) and commands, leaving out those that set up a new
// connection. It can report the script each EVALSHA/EVAL runs.
type counter struct {
	n       atomic.Int64 // round trips
	cmds    atomic.Int64
	mu      sync.Mutex
	scripts []string // first argument of every EVALSHA/EVAL since Reset
	onCmd   func(redis.Cmder)
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if connSetup(cmd) {
			return next(ctx, cmd)
		}
		c.n.Add(1)
		c.cmds.Add(1)
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			c.mu.Lock()
			c.scripts = append(c.scripts, cmd.Args()[1].(string))
			f := c.onCmd
			c.mu.Unlock()
			if f != nil {
				f(cmd)
			}
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if connSetup(cmds[0]) {
			return next(ctx, cmds)
		}
		c.n.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// connSetup reports a command that go-redis sends to set up a new
// connection.
func connSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// take returns the round trips since the last call and resets the count.
func (c *counter) take() int64 {
	c.mu.Lock()
	c.scripts = nil
	c.mu.Unlock()
	c.cmds.Store(0)
	return c.n.Swap(0)
}

// app is an HTTP handler behind an Engine on a store, recording what ran.
type app struct {
	handler http.Handler
	runs    atomic.Int64
	events  chan core.Event
	block   chan struct{} // if not nil, the handler waits for it to close
	started chan struct{} // if not nil, receives when the handler starts
}

func newApp(t testing.TB, store core.Store, cfg core.Config) *app {
	t.Helper()
	a := &app{events: make(chan core.Event, 1024)}
	cfg.Store = store
	cfg.Observer = func(ev core.Event) {
		select {
		case a.events <- ev:
		default:
		}
	}
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.runs.Add(1)
		if a.started != nil {
			a.started <- struct{}{}
		}
		if a.block != nil {
			<-a.block
		}
		if strings.Contains(r.URL.RawQuery, "fail") {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"order":` + strconv.FormatInt(n, 10) + `}`))
	})))
	a.handler = mux
	return a
}

// do sends one POST /orders with key ("" for none) and returns the response.
func (a *app) do(key string) *httptest.ResponseRecorder {
	return a.doPath("/orders", key)
}

func (a *app) doPath(path, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"item":"book"}`))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	a.handler.ServeHTTP(w, r)
	return w
}

// event returns the next event the Engine reported.
func (a *app) event(t testing.TB) core.Event {
	t.Helper()
	select {
	case ev := <-a.events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event reported")
		return core.Event{}
	}
}

// drainEvents drops the events reported so far.
func (a *app) drainEvents() {
	for {
		select {
		case <-a.events:
		default:
			return
		}
	}
}

// blackhole listens on loopback and accepts connections that never answer,
// for timeouts. It returns the address.
func blackhole(t testing.TB) string {
	addr, _ := countingBlackhole(t)
	return addr
}

// countingBlackhole is blackhole, and the number of connections it has
// accepted.
func countingBlackhole(t testing.TB) (string, *atomic.Int32) {
	t.Helper()
	var accepted atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), &accepted
}

// testKey returns a fresh client key.
func testKey(t testing.TB, n int) string {
	return t.Name() + "-" + strconv.Itoa(n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// mustNew is redislock.New for a test: it fails the test on an error.
func mustNew(tb testing.TB, c redis.Scripter, opts *redislock.Options) *redislock.Store {
	tb.Helper()
	s, err := redislock.New(c, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
