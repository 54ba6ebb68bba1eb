//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
	"github.com/idem-go/idem/redislock"
	"github.com/idem-go/idem/redislock/redistest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds idemctl once for the tests' run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idemctl-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "idemctl")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// exitOf runs the binary with args and returns its exit code and output.
func exitOf(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("idemctl %v: %v", args, err)
	return 0, "", ""
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return port
}

func TestIntegrationRedis(t *testing.T) {
	c, prefix := redistest.Client(t)
	store, err := redislock.New(c, &redislock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	testIdemctl(t, store,
		[]string{"-redis", "redis://" + redistest.Addr() + "/0", "-prefix", prefix},
		[]string{"-redis", "redis://127.0.0.1:" + closedPort(t) + "/0?max_retries=-1&dial_timeout=1s"})
}

func TestIntegrationPostgres(t *testing.T) {
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(context.Background(), pool, opts); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	testIdemctl(t, store,
		[]string{"-postgres", pgtest.URL(), "-schema", schema},
		[]string{"-postgres", "postgres://postgres@127.0.0.1:" + closedPort(t) + "/test?connect_timeout=2"})
}

// A tiered store (the examples with REDIS_URL and DATABASE_URL) keeps a
// key in both tiers: idemctl given both URLs works on both, as the Engine
// does. Given one, a purge left the other tier's record, which the Engine
// still replayed: the operator read "purged" and the key did not run again.
func TestIntegrationTiered(t *testing.T) {
	c, prefix := redistest.Client(t)
	rs, err := redislock.New(c, &redislock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(context.Background(), pool, opts); err != nil {
		t.Fatal(err)
	}
	ps, err := pgstore.NewTx(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ps.Close)
	testIdemctl(t, core.NewTiered(rs, ps),
		[]string{"-redis", "redis://" + redistest.Addr() + "/0", "-prefix", prefix, "-postgres", pgtest.URL(), "-schema", schema},
		[]string{"-redis", "redis://127.0.0.1:" + closedPort(t) + "/0?max_retries=-1&dial_timeout=1s",
			"-postgres", "postgres://postgres@127.0.0.1:" + closedPort(t) + "/test?connect_timeout=2"})
}

// orderApp is an order API on an Engine over a store, scoped by X-User-ID
// as the examples are; a request whose body says "block" holds its handler
// until release is closed.
type orderApp struct {
	url     string
	runs    atomic.Int64
	started chan struct{}
	release chan struct{}
}

func newOrderApp(t *testing.T, store core.Store) *orderApp {
	t.Helper()
	eng, err := core.New(core.Config{
		Store:    store,
		Scope:    func(r *core.Request) string { return r.Header.Get("X-User-ID") },
		Observer: func(core.Event) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &orderApp{started: make(chan struct{}, 1), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.runs.Add(1)
		var body struct{ Block bool }
		json.NewDecoder(r.Body).Decode(&body)
		if body.Block {
			a.started <- struct{}{}
			<-a.release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"run":` + strconv.FormatInt(n, 10) + `}`))
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

func (a *orderApp) post(t *testing.T, user, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", a.url+"/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-ID", user)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func testIdemctl(t *testing.T, store core.Store, flags, downFlags []string) {
	ctx := context.Background()
	app := newOrderApp(t, store)
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return exitOf(t, append(append([]string{}, flags...), args...)...)
	}
	key := func(name string) string { return name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) }

	// inspect a key an order completed, by the user's scope and its key alone.
	k1 := key("k1")
	before := time.Now()
	if resp := app.post(t, "alice", k1, `{"item":"book"}`); resp.StatusCode != 201 {
		t.Fatalf("first order: %d", resp.StatusCode)
	}
	code, stdout, stderr := ctl("inspect", "-scope", "alice", "-key", k1, "-json")
	var k admin.Key
	if err := json.Unmarshal([]byte(stdout), &k); code != 0 || err != nil {
		t.Fatalf("inspect: exit %d, %q, %q", code, stdout, stderr)
	}
	if k.ID != core.ID("alice", k1, "") || k.Status != "completed" || k.Scope != "alice" || k.Key != k1 || k.Code != 201 ||
		k.Size != int64(len(`{"run":1}`)) || k.Body != "" || k.Created.Before(before.Add(-time.Second)) || k.Completed.Before(k.Created) ||
		k.Expires.Sub(k.Completed.Add(24*time.Hour)).Abs() > 5*time.Second {
		t.Fatalf("inspect: %s", stdout)
	}
	if code, stdout, _ := ctl("inspect", "-scope", "alice", "-key", k1, "-body"); code != 0 || !strings.Contains(stdout, "\nbody:\n{\"run\":1}\n") {
		t.Fatalf("inspect -body: exit %d\n%s", code, stdout)
	}

	// purge while the request runs: refused; the key is listed in flight.
	k2 := key("k2")
	done := make(chan int, 1)
	go func() { done <- app.post(t, "alice", k2, `{"block":true}`).StatusCode }()
	<-app.started
	if code, _, stderr := ctl("purge", "-scope", "alice", "-key", k2); code != 2 || !strings.Contains(stderr, "in flight") {
		t.Fatalf("purge in flight: exit %d, %q", code, stderr)
	}
	code, stdout, _ = ctl("inflight", "-json")
	var list admin.KeyList
	if err := json.Unmarshal([]byte(stdout), &list); code != 0 || err != nil || len(list.Keys) != 1 ||
		list.Keys[0].ID != core.ID("alice", k2, "") || list.Keys[0].LockedAt.IsZero() || list.Keys[0].AgeSeconds < 0 {
		t.Fatalf("inflight: exit %d\n%s", code, stdout)
	}
	close(app.release)
	if got := <-done; got != 201 {
		t.Fatalf("the blocked order: %d", got)
	}

	// purge, then the retry runs the handler again.
	if code, stdout, _ := ctl("purge", "-scope", "alice", "-key", k1); code != 0 || !strings.HasPrefix(stdout, "purged ") {
		t.Fatalf("purge: exit %d, %q", code, stdout)
	}
	runs := app.runs.Load()
	resp := app.post(t, "alice", k1, `{"item":"book"}`)
	if resp.StatusCode != 201 || resp.Header.Get("X-Idempotency-Replay") != "" || app.runs.Load() != runs+1 {
		t.Fatalf("retry after purge: %d, replay %q, runs %d → %d", resp.StatusCode, resp.Header.Get("X-Idempotency-Replay"), runs, app.runs.Load())
	}
	if resp := app.post(t, "alice", k1, `{"item":"book"}`); resp.Header.Get("X-Idempotency-Replay") != "true" {
		t.Fatalf("the retry's response is not stored: replay %q", resp.Header.Get("X-Idempotency-Replay"))
	}

	// A stale lock (an instance died holding it): 409 until unlocked.
	k3 := key("k3")
	if _, token, err := store.Acquire(ctx, core.ID("alice", k3, ""), time.Hour); err != nil || token == "" {
		t.Fatalf("stale lock: %q, %v", token, err)
	}
	if resp := app.post(t, "alice", k3, `{}`); resp.StatusCode != http.StatusConflict {
		t.Fatalf("order on a stale lock: %d, want 409", resp.StatusCode)
	}
	if code, stdout, _ := ctl("inflight"); code != 0 || !strings.Contains(stdout, core.ID("alice", k3, "")+"  in_flight  ") {
		t.Fatalf("inflight: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := ctl("unlock", "-scope", "alice", "-key", k3); code != 2 || !strings.Contains(stderr, "-yes") {
		t.Fatalf("unlock without -yes: exit %d, %q", code, stderr)
	}
	if code, _, _ := ctl("unlock", "-scope", "alice", "-key", k3, "-yes"); code != 0 {
		t.Fatalf("unlock -yes: exit %d", code)
	}
	if resp := app.post(t, "alice", k3, `{}`); resp.StatusCode != 201 {
		t.Fatalf("order after unlock: %d", resp.StatusCode)
	}

	// Not found, and a store that is down.
	if code, _, _ := ctl("inspect", "-scope", "bob", "-key", k1); code != 1 {
		t.Fatalf("inspect of another user's key: exit %d, want 1", code)
	}
	for _, args := range [][]string{{"inspect", "-key", k1}, {"purge", "-key", k1}, {"inflight"}} {
		code, _, stderr := exitOf(t, append(append([]string{}, downFlags...), args...)...)
		if code != 3 || !strings.Contains(stderr, "store error") {
			t.Fatalf("%v on a store that is down: exit %d, %q", args, code, stderr)
		}
	}
}
