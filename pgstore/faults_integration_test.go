//go:build integration

package pgstore_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
)

// pgServer is a PostgreSQL cluster of the test's own, on a loopback port:
// initdb into a temporary directory, pg_ctl to start and stop it.
type pgServer struct {
	t    testing.TB
	dir  string
	port int
}

// pgBin finds a PostgreSQL server program: on the PATH, or in Debian's
// /usr/lib/postgresql/<version>/bin.
func pgBin(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name); len(m) > 0 {
		return m[len(m)-1]
	}
	t.Fatalf("%s not found: the fault tests need the PostgreSQL server's programs", name)
	return ""
}

// asPostgres runs a PostgreSQL program, as the postgres user when this
// process is root (initdb and postgres refuse to run as root).
func asPostgres(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	bin := pgBin(t, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

// startPostgres runs initdb and starts the cluster on a free port;
// t.Cleanup stops it and deletes it.
func startPostgres(t testing.TB) *pgServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "idem-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := asPostgres(t, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust",
		"--no-sync", "--no-instructions").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s := &pgServer{t: t, dir: dir, port: freePort(t)}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *pgServer) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", s.port)
}

func (s *pgServer) start() {
	s.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50", s.port, s.dir)
	if out, err := asPostgres(s.t, "pg_ctl", "-D", filepath.Join(s.dir, "data"), "-o", opts,
		"-l", filepath.Join(s.dir, "log"), "-w", "-t", "30", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

// stop shuts the cluster down the fast way, as a restart does: the server
// ends every session with an error.
func (s *pgServer) stop() {
	asPostgres(s.t, "pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "fast", "-w", "stop").Run()
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ownStore starts a cluster of the test's own and returns a store on it.
func ownStore(t *testing.T, poolOpts string) (*pgServer, *pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	srv := startPostgres(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.url()+poolOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool, nil); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, &pgstore.Options{JanitorInterval: -1, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return srv, pool, store
}

// TestIntegrationFaults runs traffic through a fail-open and a fail-closed
// app on a PostgreSQL of its own, stops it mid-traffic and starts it
// again: during the outage fail-open runs the handler and reports the
// error, fail-closed answers 503; after the restart protection resumes by
// itself, on the pool's connections of before the outage.
func TestIntegrationFaults(t *testing.T) {
	srv, _, store := ownStore(t, "&pool_max_conns=8")
	open := newApp(t, store, core.Config{})
	closed := newApp(t, store, core.Config{FailClosed: true})
	// The traffic runs on apps of its own: the checks count their apps' runs.
	trafficApps := []*app{newApp(t, store, core.Config{}), newApp(t, store, core.Config{FailClosed: true})}

	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		statuses sync.Map // status code -> *atomic.Int64
		sent     atomic.Int64
		progress = make(chan struct{}, 1<<15)
	)
	traffic := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-progress:
			case <-time.After(20 * time.Second):
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
				code := trafficApps[w%2].do(fmt.Sprintf("traffic-%d-%d", w, i/2)).Code // each key twice
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
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopTraffic)

	key := "before"
	if w := closed.do(key); w.Code != http.StatusCreated {
		t.Fatalf("before the outage: %d", w.Code)
	}
	traffic(200)
	srv.stop() // mid-traffic
	for len(progress) > 0 {
		<-progress
	}
	traffic(8) // responses during the outage
	open.drainEvents()
	runs := open.runs.Load()
	if w := open.do("during"); w.Code != http.StatusCreated || open.runs.Load() == runs {
		t.Fatalf("fail-open during the outage: %d, want the handler's own 201", w.Code)
	}
	for {
		ev := open.event(t)
		if ev.Outcome == core.OutcomeStoreError && ev.Err != nil {
			t.Logf("fail-open reported: %v", ev.Err)
			break
		}
	}
	closedRuns := closed.runs.Load()
	if w := closed.do("during-closed"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("fail-closed during the outage: %d, want 503", w.Code)
	}
	if closed.runs.Load() != closedRuns {
		t.Error("fail-closed ran the handler during the outage")
	}

	srv.start() // same port, same data
	deadline := time.Now().Add(20 * time.Second)
	key = "after"
	for {
		w := closed.do(key)
		if w.Code == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("protection did not resume: %d %s", w.Code, w.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	closedRuns = closed.runs.Load()
	for _, a := range []*app{open, closed} {
		if w := a.do(key); w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "true" {
			t.Fatalf("after the restart: %d %v, want a replay", w.Code, w.Header())
		}
	}
	if w := closed.do("before"); w.Header().Get(core.HeaderReplay) != "true" {
		t.Fatalf("the record of before the outage: %d, want its replay", w.Code)
	}
	if closed.runs.Load() != closedRuns {
		t.Fatal("a key sent after the restart ran twice")
	}
	traffic(200)
	stopTraffic()
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

// TestIntegrationClosedConnections has PostgreSQL end every session of the
// pool while its connections sit idle (a restart, a proxy, an idle timeout
// do that): the next requests must not fail on the dead connections while
// PostgreSQL is up (fail-open would run them unprotected, and their
// retries would run the handler again). The store runs a statement again
// on a lost connection and resets the pool.
func TestIntegrationClosedConnections(t *testing.T) {
	_, pool, store := ownStore(t, "&pool_max_conns=16")
	ctx := context.Background()
	// Fill the pool: 16 connections, each used a moment ago (the pool
	// pings only those idle over a second).
	conns := make([]*pgxpool.Conn, 16)
	for i := range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
	admin, err := pgx.Connect(ctx, strings.Replace(pool.Config().ConnString(), "pool_max_conns=16", "", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var killed int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&killed); err != nil || killed < 16 {
		t.Fatalf("pg_terminate_backend: %d, %v", killed, err)
	}
	a := newApp(t, store, core.Config{})
	for i := range 10 {
		key := "key-" + strconv.Itoa(i)
		first, again := a.do(key), a.do(key)
		if first.Code != http.StatusCreated || again.Header().Get(core.HeaderReplay) != "true" {
			t.Fatalf("key %d: %d then %d (replay %q), want 201 then its replay", i, first.Code, again.Code, again.Header().Get(core.HeaderReplay))
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
