//go:build integration

package pgstore_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// row is a row of the store's table, as an operator reads it.
type row struct {
	status                 string
	token                  *string
	lockedFor              *time.Duration // locked_until - now()
	record                 []byte
	code                   *int32
	createdAt, completedAt *time.Time
	expiresIn              *time.Duration // expires_at - now()
}

func readRow(t *testing.T, pool *pgxpool.Pool, schema, key string) (row, bool) {
	t.Helper()
	var r row
	err := pool.QueryRow(context.Background(), `SELECT status, lock_token, locked_until - now(), record, status_code,
	created_at, completed_at, expires_at - now() FROM `+pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()+` WHERE key = $1`, key).
		Scan(&r.status, &r.token, &r.lockedFor, &r.record, &r.code, &r.createdAt, &r.completedAt, &r.expiresIn)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

func within(t *testing.T, what string, got *time.Duration, want time.Duration) {
	t.Helper()
	if got == nil || *got > want || *got < want-5*time.Second {
		t.Fatalf("%s = %v, want %v (less at most 5s)", what, got, want)
	}
}

// newStore migrates a schema of the test's own and returns a store on it,
// without a janitor, with the pool and the schema.
func newStore(t *testing.T, opts *pgstore.Options) (*pgstore.Store, *pgxpool.Pool, string) {
	t.Helper()
	pool, schema := pgtest.Pool(t)
	o := pgstore.Options{JanitorInterval: -1}
	if opts != nil {
		o = *opts
	}
	o.Schema = schema
	if err := pgstore.Migrate(context.Background(), pool, &o); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, pool, schema
}

// TestIntegrationRows reads the columns back after each operation.
func TestIntegrationRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, schema := newStore(t, nil)
	key := idemtest.Key(t)

	_, token, err := s.Acquire(ctx, key, 90*time.Second)
	if err != nil || token == "" {
		t.Fatalf("Acquire = %q, %v", token, err)
	}
	r, _ := readRow(t, pool, schema, key)
	if r.status != "processing" || r.token == nil || *r.token != token || r.record != nil || r.code != nil || r.expiresIn != nil {
		t.Fatalf("locked row: %+v", r)
	}
	within(t, "lock", r.lockedFor, 90*time.Second)
	if err := s.Refresh(ctx, key, token, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	r, _ = readRow(t, pool, schema, key)
	within(t, "refreshed lock", r.lockedFor, 5*time.Minute)

	if err := s.Complete(ctx, key, token, []byte("opaque"), 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	r, _ = readRow(t, pool, schema, key)
	// A record that is not the Engine's (the conformance suite stores
	// such) has no status code; TestIntegrationEngineTTL has one that is.
	if r.status != "completed" || r.lockedFor != nil || string(r.record) != "opaque" || r.code != nil ||
		r.token == nil || *r.token != token || r.completedAt == nil || r.completedAt.Before(*r.createdAt) {
		t.Fatalf("completed row: %+v", r)
	}
	within(t, "record", r.expiresIn, 72*time.Hour)

	// Release deletes the row.
	key = idemtest.Key(t)
	_, token, _ = s.Acquire(ctx, key, time.Minute)
	if err := s.Release(ctx, key, token); err != nil {
		t.Fatal(err)
	}
	if _, ok := readRow(t, pool, schema, key); ok {
		t.Fatal("row still there after Release")
	}
}

// TestIntegrationEngineTTL: Config.TTL sets expires_at per request, and
// the status code of the Engine's record fills status_code.
func TestIntegrationEngineTTL(t *testing.T) {
	t.Parallel()
	s, pool, schema := newStore(t, nil)
	a := newApp(t, s, core.Config{TTL: func(*core.Request) time.Duration { return 72 * time.Hour }})
	a.do("key-1")
	var (
		n       int
		code    int32
		expires time.Duration
	)
	err := pool.QueryRow(context.Background(), `SELECT count(*), min(status_code), min(expires_at - now()) FROM `+
		pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()).Scan(&n, &code, &expires)
	if err != nil || n != 1 || code != http.StatusCreated {
		t.Fatalf("%d rows, status_code %d, %v", n, code, err)
	}
	within(t, "record via the Engine", &expires, 72*time.Hour)
}

// counter counts the statements a pool sends (a pgx QueryTracer, with
// prepares) and the writes to its connections: a write is a round trip.
type counter struct {
	statements, writes atomic.Int64
}

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *counter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.statements.Add(1)
	return ctx
}
func (c *counter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (c *counter) take() (statements, writes int64) {
	return c.statements.Swap(0), c.writes.Swap(0)
}

type countingConn struct {
	net.Conn
	c *counter
}

func (cc countingConn) Write(b []byte) (int, error) {
	cc.c.writes.Add(1)
	return cc.Conn.Write(b)
}

// TestIntegrationRoundTrips counts what the store sends: one statement in
// one round trip per operation, so 2 per first request and 1 per replay,
// as on Redis.
func TestIntegrationRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, schema := newStore(t, nil) // the schema, migrated
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	var cnt counter
	cfg.MaxConns = 1 // one connection, whose statements are prepared by the warm-up
	cfg.ConnConfig.Tracer = &cnt
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false } // the pool's, not the store's
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		return countingConn{c, &cnt}, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(pool, &pgstore.Options{Schema: schema, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	a := newApp(t, s, core.Config{})
	// Warm-up: the connection's setup, and each statement prepared once.
	a.do("warm-up")
	a.do("warm-up")
	_, tok, _ := s.Acquire(ctx, "abc", time.Minute)
	s.Refresh(ctx, "abc", tok, time.Minute)
	s.Release(ctx, "abc", tok)
	cnt.take()

	want := func(what string, stmts, writes int64) {
		t.Helper()
		if s, w := cnt.take(); s != stmts || w != writes {
			t.Fatalf("%s: %d statements in %d round trips, want %d in %d", what, s, w, stmts, writes)
		}
	}
	for i := range 20 {
		key := "key-" + strconv.Itoa(i)
		a.do(key)
		want("first request", 2, 2)
		a.do(key)
		want("replay", 1, 1)
	}
	key := idemtest.Key(t)
	_, token, err := s.Acquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want("Acquire", 1, 1)
	if err := s.Refresh(ctx, key, token, time.Minute); err != nil {
		t.Fatal(err)
	}
	want("Refresh", 1, 1)
	if err := s.Release(ctx, key, token); err != nil {
		t.Fatal(err)
	}
	want("Release", 1, 1)
	// Taking over an expired lock is one statement too.
	s.Acquire(ctx, key, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the lock expires
	cnt.take()
	if _, tok, err := s.Acquire(ctx, key, time.Minute); err != nil || tok == "" {
		t.Fatalf("takeover: %q, %v", tok, err)
	}
	want("takeover", 1, 1)
}

// TestIntegrationConcurrentTakeover: many requests find one expired lock
// (or record) at once; exactly one takes it over, and the stale owner's
// Complete is fenced off.
func TestIntegrationConcurrentTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, _ := newStore(t, nil)
	for _, expired := range []string{"lock", "record"} {
		key := idemtest.Key(t)
		_, stale, err := s.Acquire(ctx, key, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if expired == "record" {
			if err := s.Complete(ctx, key, stale, []byte("old"), 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond) // the lock or record expires
		const n = 50
		var (
			wg       sync.WaitGroup
			tokens   atomic.Int64
			inFlight atomic.Int64
			winner   atomic.Value
		)
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				rec, token, err := s.Acquire(ctx, key, time.Minute)
				switch {
				case errors.Is(err, core.ErrInFlight):
					inFlight.Add(1)
				case err != nil:
					t.Errorf("Acquire: %v", err)
				case rec != nil:
					t.Errorf("expired %s replayed: %q", expired, rec)
				default:
					tokens.Add(1)
					winner.Store(token)
				}
			}()
		}
		close(start)
		wg.Wait()
		if tokens.Load() != 1 || inFlight.Load() != n-1 {
			t.Fatalf("expired %s: %d takeovers, %d in flight; want 1 and %d", expired, tokens.Load(), inFlight.Load(), n-1)
		}
		if err := s.Complete(ctx, key, stale, []byte("stale"), time.Minute); !errors.Is(err, core.ErrLockLost) {
			t.Fatalf("stale Complete after the takeover: %v, want ErrLockLost", err)
		}
		if err := s.Complete(ctx, key, winner.Load().(string), []byte("new"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if rec, _, _ := s.Acquire(ctx, key, time.Minute); string(rec) != "new" {
			t.Fatalf("record %q, want the takeover's", rec)
		}
	}
}

// TestIntegrationConcurrentDuplicatesEngine sends 100 duplicates of each
// of 10 keys at once through the Engine: 10 runs, every other response a
// 409 or the replay.
func TestIntegrationConcurrentDuplicatesEngine(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, nil)
	a := newApp(t, s, core.Config{})
	const keys, dups = 10, 100
	// Each key's run is held until its other duplicates have answered.
	held := make(map[string]chan struct{}, keys)
	answered := make(map[string]*atomic.Int64, keys)
	for k := range keys {
		key := "dup-" + strconv.Itoa(k)
		held[key], answered[key] = make(chan struct{}), new(atomic.Int64)
	}
	a.hold = func(key string) {
		select {
		case <-held[key]:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: its duplicates did not all answer while its run was held", key)
		}
	}
	var (
		wg        sync.WaitGroup
		conflicts atomic.Int64
	)
	start := make(chan struct{})
	for k := range keys {
		key := "dup-" + strconv.Itoa(k)
		for range dups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				w := a.do(key)
				switch w.Code {
				case http.StatusConflict:
					conflicts.Add(1)
				case http.StatusCreated:
				default:
					t.Errorf("status %d: %s", w.Code, w.Body)
				}
				if answered[key].Add(1) == dups-1 {
					close(held[key])
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if n, c := a.runs.Load(), conflicts.Load(); n != keys || c != keys*(dups-1) {
		t.Fatalf("handler ran %d times for %d keys, %d conflicts; want %d", n, keys, c, keys*(dups-1))
	}
}

// TestIntegrationTimeout: a statement that waits (here on a row lock held
// by an open transaction) gives up after Options.Timeout, and the Engine's
// policy applies.
func TestIntegrationTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, schema := newStore(t, &pgstore.Options{Timeout: 300 * time.Millisecond, JanitorInterval: -1})
	key := idemtest.Key(t)
	_, token, _ := s.Acquire(ctx, key, time.Millisecond)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT FROM "+pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()+" WHERE key = $1 FOR UPDATE", key); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Acquire(ctx, key, time.Minute)
	if err == nil || !strings.HasPrefix(err.Error(), "pgstore: acquire: ") {
		t.Fatalf("Acquire of a row held by a transaction: %v, want a timeout", err)
	}
	if err := s.Complete(ctx, key, token, []byte("x"), time.Minute); err == nil {
		t.Fatal("Complete of a row held by a transaction: no error")
	}
}

// app is an HTTP handler behind an Engine on a store, counting its runs;
// hold, if set, is called with a run's key before it answers.
type app struct {
	handler http.Handler
	runs    atomic.Int64
	events  chan core.Event
	hold    func(key string)
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
		if a.hold != nil {
			a.hold(r.Header.Get("Idempotency-Key"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"order":` + strconv.FormatInt(n, 10) + `}`))
	})))
	a.handler = mux
	return a
}

// do sends one POST /orders with key ("" for none).
func (a *app) do(key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
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
