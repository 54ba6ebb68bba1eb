//go:build integration

package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idem-go/idem/core"
	ordersv1 "github.com/idem-go/idem/examples/grpc/proto/idem/examples/orders/v1"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/redislock"
)

// grpcurlVersion is the grpcurl the test installs with go install.
const grpcurlVersion = "v1.9.4"

// TestGrpcurl runs the command of the "Done when" twice against
// the example (on a port of its own rather than 9090): the same order
// both times, the second marked as a replay in its response headers.
func TestGrpcurl(t *testing.T) {
	gobin := t.TempDir()
	install := exec.Command("go", "install", "github.com/fullstorydev/grpcurl/cmd/grpcurl@"+grpcurlVersion)
	install.Env = append(os.Environ(), "GOBIN="+gobin, "GOWORK=off")
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("cannot install grpcurl %s: %v\n%s", grpcurlVersion, err, out)
	}
	in := start(t)
	call := func() (headers, contents string) {
		t.Helper()
		out, err := exec.Command(filepath.Join(gobin, "grpcurl"), "-v", "-plaintext", "-H", "idempotency-key: k1",
			"-d", `{"item":"x","qty":1}`, in.addr, "idem.examples.orders.v1.Orders/CreateOrder").CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl: %v\n%s", err, out)
		}
		s := string(out)
		_, rest, ok1 := strings.Cut(s, "Response headers received:")
		headers, rest, ok2 := strings.Cut(rest, "Response contents:")
		contents, _, ok3 := strings.Cut(rest, "Response trailers received:")
		if !ok1 || !ok2 || !ok3 {
			t.Fatalf("grpcurl -v output:\n%s", s)
		}
		return headers, strings.TrimSpace(contents)
	}
	h1, c1 := call()
	h2, c2 := call()
	if c1 != c2 || !strings.Contains(c1, `"id": "ord_1"`) {
		t.Fatalf("orders:\n%s\nthen\n%s\nwant ord_1 twice", c1, c2)
	}
	if strings.Contains(h1, "x-idempotency-replay") || !strings.Contains(h2, "x-idempotency-replay: true") {
		t.Fatalf("response headers:\n%s\nthen\n%s\nwant x-idempotency-replay: true on the second only", h1, h2)
	}
}

// TestSeveralInstances starts three instances on the real Redis at
// IDEM_REDIS_ADDR (default 127.0.0.1:6379), then on a PostgreSQL database
// of the test's own (transactional, then IDEM_TX=0), then on both (the
// tiered store), and spreads duplicates over them: each key creates exactly
// one order. Keys are fresh; orders are counted by difference, as other
// runs share the Redis list.
func TestSeveralInstances(t *testing.T) {
	addr := os.Getenv("IDEM_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	dropOrdersAfter(t, addr)
	t.Run("redis", func(t *testing.T) { testSeveralInstances(t, "REDIS_URL=redis://"+addr+"/0") })
	t.Run("postgres", func(t *testing.T) { testSeveralInstances(t, "DATABASE_URL="+database(t)) })
	t.Run("postgres IDEM_TX=0", func(t *testing.T) { testSeveralInstances(t, "DATABASE_URL="+database(t), "IDEM_TX=0") })
	t.Run("tiered", func(t *testing.T) {
		env := []string{"REDIS_URL=redis://" + addr + "/0", "DATABASE_URL=" + database(t)}
		testSeveralInstances(t, env...)
		// The reply is in Redis too, where the tiered store serves replays
		// from: REDIS_URL is not ignored beside DATABASE_URL.
		k := newKey()
		if r := start(t, env...).create("alice", k, req("book", 1)); r.err != nil {
			t.Fatal(r.err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		record := redislock.DefaultPrefix + ":{" + core.ID("alice", k, "") + "}"
		if n, err := rdb.Exists(context.Background(), record).Result(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s: %d, %v; want the tiered store's copy in Redis", record, n, err)
		}
		rdb.Del(context.Background(), record) //nolint:errcheck // it expires anyway
	})
}

// dropOrdersAfter deletes the example's order keys from the Redis at addr
// when t ends, unless they were there before it (an example running on
// that Redis): they have no TTL and would outlive the test for ever.
func dropOrdersAfter(t *testing.T, addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	before, err := rdb.Exists(ctx, redisList, redisSeq).Result()
	if err != nil {
		rdb.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer rdb.Close()
		if before == 0 {
			if err := rdb.Del(ctx, redisList, redisSeq).Err(); err != nil {
				t.Errorf("DEL %s %s: %v", redisList, redisSeq, err)
			}
		}
	})
}

// database creates a PostgreSQL database of the test's own on the server
// at IDEM_PG_URL (default the local one) and returns its URL; t.Cleanup
// drops it.
func database(t *testing.T) string {
	admin := cmp.Or(os.Getenv("IDEM_PG_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	ctx := context.Background()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	name := "idem_grpc_" + strings.ToLower(rand.Text())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// testSeveralInstances starts three instances together, as a deployment
// does: each creates its tables if needed, and none may fail for the others.
func testSeveralInstances(t *testing.T, env ...string) {
	var waits []func() *instance
	for range 3 {
		waits = append(waits, launch(t, env...))
	}
	var instances []*instance
	for _, wait := range waits {
		instances = append(instances, wait())
	}
	before := instances[0].count()
	const keys, dups = 10, 15
	for range keys {
		k := newKey()
		results := make([]result, dups)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = instances[i%len(instances)].create("alice", k,
					&ordersv1.CreateOrderRequest{Item: "lamp", Qty: 1, DelayMs: 50})
			}()
		}
		wg.Wait()
		id := ""
		for _, r := range results {
			switch status.Code(r.err) {
			case codes.OK:
				if id != "" && r.order.Id != id {
					t.Fatalf("key %s: orders %s and %s", k, id, r.order.Id)
				}
				id = r.order.Id
			case codes.Aborted:
			default:
				t.Fatalf("call: %v", r.err)
			}
		}
	}
	for i, in := range instances {
		if got := in.count() - before; got != keys {
			t.Fatalf("instance %d sees %d new orders, want %d (one per key)", i, got, keys)
		}
	}
}

// With IDEM_FAIL_CLOSED=1 and its Redis gone, CreateOrder is refused with
// Unavailable (STORE_UNAVAILABLE) instead of running unprotected, whose
// handler would fail on Redis itself (Internal). The Redis is the test's
// own, on a unix socket.
func TestFailClosed(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	redisSrv := exec.Command("redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	out, err := redisSrv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := redisSrv.Start(); err != nil {
		t.Skipf("redis-server: %v", err)
	}
	ready, exited := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "ready to accept connections at "+sock) {
				close(ready)
				break
			}
		}
		io.Copy(io.Discard, out) //nolint:errcheck // until it exits
		redisSrv.Wait()          //nolint:errcheck // killed below
		close(exited)
	}()
	t.Cleanup(func() { redisSrv.Process.Kill(); <-exited }) //nolint:errcheck // may be gone already
	select {
	case <-ready:
	case <-exited:
		t.Fatal("redis-server exited before it was ready")
	case <-time.After(30 * time.Second):
		t.Fatal("redis-server not ready within 30s")
	}
	in := start(t, "IDEM_FAIL_CLOSED=1", "REDIS_URL=unix://"+sock, "DATABASE_URL=")
	if r := in.create("alice", newKey(), req("book", 1)); r.err != nil {
		t.Fatalf("with Redis up: %v", r.err)
	}
	redisSrv.Process.Kill() //nolint:errcheck
	<-exited
	r := in.create("alice", newKey(), req("book", 1))
	st := status.Convert(r.err)
	var reason string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	if st.Code() != codes.Unavailable || reason != grpcidem.ReasonStoreUnavailable {
		t.Fatalf("with Redis gone: %v (reason %q), want Unavailable, %s", r.err, reason, grpcidem.ReasonStoreUnavailable)
	}
}
