//go:build integration

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/instrument"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// txApp is a net/http app on the transactional store whose handler inserts
// an order through the request's transaction, then answers as the test
// says: status from the body's "status" field, "abort" to run a failing
// statement first.
type txApp struct {
	t      *testing.T
	pool   *pgxpool.Pool
	store  *pgxpool.Pool // the store's pool: pool unless newTxApp bounds it
	orders string
	url    string
	runs   atomic.Int64
	// If hold is not nil, the handler tells started after its insert, then
	// waits on hold.
	hold, started chan struct{}
	pid           atomic.Int32 // the backend of the held request's transaction
}

// newTxApp starts the app; maxConns > 0 bounds the store's pool.
func newTxApp(t *testing.T, cfg core.Config, maxConns int32) *txApp {
	t.Helper()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	o := pgstore.Options{Schema: schema}
	if err := pgstore.Migrate(ctx, pool, &o); err != nil {
		t.Fatal(err)
	}
	a := &txApp{t: t, pool: pool, orders: pgx.Identifier{schema, "orders"}.Sanitize(), started: make(chan struct{}, 1)}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+a.orders+" (id bigserial PRIMARY KEY, key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	storePool := pool
	if maxConns > 0 {
		pc := pool.Config()
		pc.MaxConns = maxConns
		var err error
		if storePool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(storePool.Close)
	}
	a.store = storePool
	store, err := pgstore.NewTx(storePool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	cfg.Store = store
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(eng.Middleware(http.HandlerFunc(a.handle)))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

func (a *txApp) handle(w http.ResponseWriter, r *http.Request) {
	a.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	tx := pgstore.Tx(r.Context())
	if tx == nil {
		http.Error(w, "no transaction", http.StatusTeapot)
		return
	}
	if strings.Contains(string(body), "abort") {
		tx.Exec(r.Context(), "SELECT 1/0") //nolint:errcheck // aborts the transaction
	}
	var id int64
	if err := tx.QueryRow(r.Context(), "INSERT INTO "+a.orders+" (key) VALUES ($1) RETURNING id",
		r.Header.Get("Idempotency-Key")).Scan(&id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest) // stored, like any 4xx
		return
	}
	if strings.Contains(string(body), "ignore") {
		tx.Exec(r.Context(), "SELECT 1/0") //nolint:errcheck // a failure the handler ignores: the order is lost
	}
	if err := tx.Commit(r.Context()); !errors.Is(err, pgstore.ErrTxManaged) {
		http.Error(w, fmt.Sprintf("Commit by the handler: %v", err), http.StatusInternalServerError)
		return
	}
	if a.hold != nil {
		var pid int32
		if err := tx.QueryRow(r.Context(), "SELECT pg_backend_pid()").Scan(&pid); err == nil {
			a.pid.Store(pid)
		}
		a.started <- struct{}{}
		<-a.hold
	}
	status := http.StatusCreated
	if strings.Contains(string(body), "fail") {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"id":%d}`, id)
}

type txResp struct {
	status int
	replay bool
	header http.Header
	body   string
}

func (a *txApp) post(key, body string) txResp {
	a.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, a.url+"/orders", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return txResp{resp.StatusCode, resp.Header.Get(core.HeaderReplay) == "true", resp.Header, string(b)}
}

// orders returns how many orders key has.
func (a *txApp) count(key string) int {
	a.t.Helper()
	var n int
	if err := a.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+a.orders+" WHERE key = $1", key).Scan(&n); err != nil {
		a.t.Fatal(err)
	}
	return n
}

func TestIntegrationTxCommitsTogether(t *testing.T) {
	a := newTxApp(t, core.Config{}, 0)
	first := a.post("k1", `{}`)
	if first.status != http.StatusCreated || first.replay {
		t.Fatalf("first: %+v", first)
	}
	again := a.post("k1", `{}`)
	if again.status != http.StatusCreated || !again.replay || again.body != first.body ||
		again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay: %+v, first %+v", again, first)
	}
	if n := a.count("k1"); n != 1 || a.runs.Load() != 1 {
		t.Fatalf("%d orders, %d runs; want 1, 1", n, a.runs.Load())
	}
	if r := a.post("k1", `{"other":1}`); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("reused key: %d, want 422", r.status)
	}
}

// A 5xx rolls the handler's writes back with the key: a retry runs again at
// once, on a clean slate.
func TestIntegrationTxRollsBack(t *testing.T) {
	a := newTxApp(t, core.Config{}, 0)
	if r := a.post("k2", `{"fail":1}`); r.status != http.StatusInternalServerError {
		t.Fatalf("first: %+v", r)
	}
	if n := a.count("k2"); n != 0 {
		t.Fatalf("%d orders after a 500, want 0", n)
	}
	if r := a.post("k2", `{"fail":1}`); r.status != http.StatusInternalServerError || r.replay {
		t.Fatalf("retry: %+v, want a second run", r)
	}
	if a.runs.Load() != 2 {
		t.Fatalf("%d runs, want 2", a.runs.Load())
	}
}

// A handler whose statement failed answers 400: the transaction aborted, so
// nothing of it is kept, but its answer is stored as any 4xx.
func TestIntegrationTxAbortedStoresAnswer(t *testing.T) {
	a := newTxApp(t, core.Config{}, 0)
	first := a.post("k3", `{"abort":1}`)
	if first.status != http.StatusBadRequest {
		t.Fatalf("first: %+v", first)
	}
	if r := a.post("k3", `{"abort":1}`); r.status != http.StatusBadRequest || !r.replay {
		t.Fatalf("retry: %+v, want the 400 replayed", r)
	}
	if n := a.count("k3"); n != 0 || a.runs.Load() != 1 {
		t.Fatalf("%d orders, %d runs; want 0, 1", n, a.runs.Load())
	}
}

// A handler that ignores a failed statement and answers 201 is not stored:
// the transaction aborted, so its order is lost, and a stored 201 would
// announce it (a client told "created" for nothing, on every replay). The
// client gets 503, and its retry runs the handler again.
func TestIntegrationTxAbortedSuccessNotStored(t *testing.T) {
	var errs []error
	var mu sync.Mutex
	a := newTxApp(t, core.Config{Observer: func(ev core.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Err != nil {
			errs = append(errs, ev.Err)
		}
	}}, 0)
	for i := range 2 {
		if r := a.post("k5", `{"ignore":1}`); r.status != http.StatusServiceUnavailable || r.replay {
			t.Fatalf("attempt %d: %+v, want 503", i, r)
		}
	}
	if n := a.count("k5"); n != 0 || a.runs.Load() != 2 {
		t.Fatalf("%d orders, %d runs; want 0, 2", n, a.runs.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 2 || !errors.Is(errs[0], pgstore.ErrWorkAborted) {
		t.Fatalf("the events' errors: %v, want ErrWorkAborted twice", errs)
	}
}

// Concurrent duplicates of a key whose transaction is open get 409 at once
// (or, with Wait, the replay once it commits); one order in all.
func TestIntegrationTxConcurrentDuplicates(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("wait ", wait), func(t *testing.T) {
			a := newTxApp(t, core.Config{Wait: wait}, 0)
			a.hold = make(chan struct{})
			firstDone := make(chan txResp)
			go func() { firstDone <- a.post("dup", `{}`) }()
			<-a.started // the first holds the key
			const dups = 50
			var wg sync.WaitGroup
			results := make([]txResp, dups)
			for i := range dups {
				wg.Add(1)
				go func() { defer wg.Done(); results[i] = a.post("dup", `{}`) }()
			}
			if wait == 0 {
				wg.Wait()
				close(a.hold)
			} else {
				close(a.hold)
				wg.Wait()
			}
			first := <-firstDone
			if first.status != http.StatusCreated {
				t.Fatalf("first: %+v", first)
			}
			for _, r := range results {
				switch {
				case wait == 0 && r.status != http.StatusConflict:
					t.Fatalf("duplicate without Wait: %+v, want 409", r)
				case wait > 0 && (r.status != http.StatusCreated || !r.replay || r.body != first.body):
					t.Fatalf("duplicate with Wait: %+v, want the replay of %q", r, first.body)
				}
			}
			if n := a.count("dup"); n != 1 || a.runs.Load() != 1 {
				t.Fatalf("%d orders, %d runs; want 1, 1", n, a.runs.Load())
			}
		})
	}
}

// With the pool exhausted by running handlers beyond StoreTimeout, a new
// key, or a duplicate of the running one, gets 503 in both failure modes
// (the store is busy, not down: nothing runs unprotected), and the breaker
// stays closed: once the pool has room, keys run protected.
func TestIntegrationTxPoolExhausted(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailClosed=%v", failClosed), func(t *testing.T) {
			a := newTxApp(t, core.Config{FailClosed: failClosed, StoreTimeout: 200 * time.Millisecond}, 1)
			a.hold = make(chan struct{})
			firstDone := make(chan txResp)
			go func() { firstDone <- a.post("holder", `{}`) }()
			<-a.started
			for _, key := range []string{"other", "holder", "other", "a", "b", "c", "d"} { // more than BreakerFailures
				if r := a.post(key, `{}`); r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "store-unavailable") {
					close(a.hold)
					t.Fatalf("%s with the pool exhausted: %+v, want 503 store-unavailable", key, r)
				}
			}
			close(a.hold)
			if first := <-firstDone; first.status != http.StatusCreated {
				t.Fatalf("holder: %+v", first)
			}
			if a.runs.Load() != 1 || a.count("other") != 0 || a.count("holder") != 1 {
				t.Fatalf("%d runs, %d orders of the refused key, %d of the holder; want 1, 0, 1", a.runs.Load(), a.count("other"), a.count("holder"))
			}
			if r := a.post("other", `{}`); r.status != http.StatusCreated || a.count("other") != 1 {
				t.Fatalf("with room again: %+v, %d orders; want 201 through the request's transaction", r, a.count("other"))
			}
		})
	}
}

// With a key's token free but every connection of the pool in use (steps,
// replays, the application's own queries), a request also gets 503 in both
// failure modes and nothing runs unprotected; with a quota per window too,
// whose admission takes a connection before the key's.
func TestIntegrationTxPoolInUse(t *testing.T) {
	for _, tc := range []struct {
		failClosed bool
		quota      core.Quota
	}{
		{false, core.Quota{}}, {true, core.Quota{}},
		{false, core.Quota{PerWindow: 1000, Window: time.Minute}},
	} {
		t.Run(fmt.Sprintf("FailClosed=%v/PerWindow=%d", tc.failClosed, tc.quota.PerWindow), func(t *testing.T) {
			a := newTxApp(t, core.Config{FailClosed: tc.failClosed, StoreTimeout: 200 * time.Millisecond, Quota: tc.quota}, 2)
			var held []*pgxpool.Conn
			release := func() {
				for _, c := range held {
					c.Release()
				}
				held = nil
			}
			t.Cleanup(release) // before the pool closes, which waits for them
			for range 2 {
				c, err := a.store.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, c)
			}
			for _, key := range []string{"a", "b", "c", "d", "e", "f"} { // more than BreakerFailures
				if r := a.post(key, `{}`); r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "store-unavailable") {
					t.Fatalf("%s with every connection in use: %+v, want 503 store-unavailable", key, r)
				}
			}
			release()
			if a.runs.Load() != 0 {
				t.Fatalf("%d runs while the pool was in use, want 0", a.runs.Load())
			}
			// A client retries a 503: on a loaded machine a commit may take
			// longer than the 200 ms StoreTimeout, and land (the documented
			// ambiguity); the retry then replays it.
			r := a.post("a", `{}`)
			for try := 1; r.status == http.StatusServiceUnavailable && try < 3; try++ {
				t.Logf("with connections again, try %d: %+v; retried", try, r)
				r = a.post("a", `{}`)
			}
			if r.status != http.StatusCreated || a.count("a") != 1 {
				t.Fatalf("with connections again: %+v, %d orders; want 201 through the request's transaction", r, a.count("a"))
			}
		})
	}
}

// A connection lost under the open transaction (the process died, a
// proxy cut it) rolls everything back: the response is a 503, no order is
// kept, and a retry runs at once.
func TestIntegrationTxConnectionLost(t *testing.T) {
	a := newTxApp(t, core.Config{}, 0)
	a.hold = make(chan struct{})
	firstDone := make(chan txResp)
	go func() { firstDone <- a.post("lost", `{}`) }()
	<-a.started
	// The backend of the open transaction, which holds the key's lock.
	var killed bool
	err := a.pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", a.pid.Load()).Scan(&killed)
	if err != nil || !killed {
		t.Fatalf("terminating the transaction's backend: %v %v", killed, err)
	}
	close(a.hold)
	first := <-firstDone
	if first.status != http.StatusServiceUnavailable {
		t.Fatalf("after the connection was lost: %+v, want 503", first)
	}
	if n := a.count("lost"); n != 0 {
		t.Fatalf("%d orders kept from a lost transaction", n)
	}
	// pg_terminate_backend returns before the backend has exited and
	// released the key's lock: the retry goes once it has.
	for {
		var alive bool
		if err := a.pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", a.pid.Load()).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		runtime.Gosched()
	}
	a.hold = nil
	if r := a.post("lost", `{}`); r.status != http.StatusCreated || r.replay {
		t.Fatalf("retry: %+v, want a first run", r)
	}
	if n := a.count("lost"); n != 1 {
		t.Fatalf("%d orders after the retry, want 1", n)
	}
}

// The idle_in_transaction_session_timeout of the key's transaction is
// core.Config.LockTTL, at most the longest PostgreSQL accepts (24.8 days):
// a LockTTL of math.MaxInt64 used to wrap around to 1 ms.
func TestIntegrationTxIdleTimeout(t *testing.T) {
	store := pgtest.TxStore(t, nil)
	for _, tc := range []struct {
		lockTTL time.Duration
		want    string
	}{{90 * time.Second, "90s"}, {30 * 24 * time.Hour, "2147483647ms"}, {math.MaxInt64, "2147483647ms"}} {
		eng, err := core.New(core.Config{Store: store, LockTTL: tc.lockTTL})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := pgstore.Tx(r.Context()).QueryRow(r.Context(), "SHOW idle_in_transaction_session_timeout").Scan(&got); err != nil {
				t.Error(err)
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/x", nil)
		req.Header.Set("Idempotency-Key", idemtest.Key(t))
		h.ServeHTTP(w, req)
		if w.Code != http.StatusNoContent || got != tc.want {
			t.Errorf("LockTTL %v: status %d, idle_in_transaction_session_timeout %q; want 204, %s", tc.lockTTL, w.Code, got, tc.want)
		}
	}
}

// An instrumented TxStore is still one: the handler gets its transaction,
// and Begin and Commit are reported.
func TestIntegrationTxInstrumented(t *testing.T) {
	var ops sync.Map
	store := instrument.Store(pgtest.TxStore(t, nil), func(_ context.Context, op instrument.Op, _ time.Duration, err error, held int) {
		if err == nil {
			ops.Store(op.String(), held)
		}
	})
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pgstore.Tx(r.Context()) == nil {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	w := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/x", nil)
	req.Header.Set("Idempotency-Key", idemtest.Key(t))
	h.ServeHTTP(w, req)
	if w.Code != http.StatusCreated {
		t.Fatalf("status %d, want 201 (the handler had its transaction)", w.Code)
	}
	for op, held := range map[string]int{"acquire": 1, "complete": -1} {
		if got, ok := ops.Load(op); !ok || got != held {
			t.Errorf("%s reported with held %v (%v), want %d", op, got, ok, held)
		}
	}
}

// A handler whose statement aborted the transaction keeps the key while its
// answer is stored: of concurrent duplicates, one runs, the others get 409
// until they get its stored 400.
func TestIntegrationTxAbortedKeepsLock(t *testing.T) {
	a := newTxApp(t, core.Config{}, 0)
	const keys, dups = 50, 5
	for i := range keys {
		key := fmt.Sprintf("aborted-%d", i)
		var (
			ran atomic.Int64
			wg  sync.WaitGroup
		)
		for range dups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r := a.post(key, `{"abort":1}`)
					switch {
					case r.status == http.StatusConflict:
						continue
					case r.status == http.StatusBadRequest && r.replay:
						return
					case r.status == http.StatusBadRequest:
						ran.Add(1)
						return
					}
					t.Errorf("%s: %d (replay %v), want 409 or 400", key, r.status, r.replay)
					return
				}
			}()
		}
		wg.Wait()
		if n := ran.Load(); n != 1 {
			t.Fatalf("%s: %d of %d duplicates ran, want 1", key, n, dups)
		}
	}
	if runs := a.runs.Load(); runs != keys {
		t.Fatalf("%d runs for %d keys, want one each", runs, keys)
	}
}

// The transaction a handler got is closed once idem has committed it: a
// handler that keeps it cannot run statements on the connection, which
// then serves other requests.
func TestIntegrationTxClosedAfterRequest(t *testing.T) {
	store := pgtest.TxStore(t, nil)
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	kept := make(chan [2]pgx.Tx, 2) // the request's transaction, a savepoint begun in it
	srv := httptest.NewServer(eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := pgstore.Tx(r.Context())
		sp, err := tx.Begin(r.Context())
		if err == nil {
			_, err = sp.Exec(r.Context(), "SELECT 1")
		}
		if err == nil {
			err = sp.Commit(r.Context()) // the handler's own: released
		}
		if err == nil {
			sp, err = tx.Begin(r.Context()) // kept open past the request
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		kept <- [2]pgx.Tx{tx, sp}
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)
	for _, key := range []string{"kept-1", "kept-2"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %d", key, resp.StatusCode)
		}
		txs := <-kept
		ctx := context.Background()
		for i, tx := range txs {
			if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
				t.Fatalf("%d: Exec after the request: %v, want ErrTxClosed", i, err)
			}
			var n int
			if err := tx.QueryRow(ctx, "SELECT 1").Scan(&n); !errors.Is(err, pgx.ErrTxClosed) {
				t.Fatalf("%d: QueryRow after the request: %v, want ErrTxClosed", i, err)
			}
			rows, _ := tx.Query(ctx, "SELECT 1") // as pgx's docs use it: CollectRows reads the error
			if _, err := pgx.CollectRows(rows, pgx.RowTo[int]); !errors.Is(err, pgx.ErrTxClosed) {
				t.Fatalf("%d: Query after the request: %v, want ErrTxClosed", i, err)
			}
			if err := tx.SendBatch(ctx, &pgx.Batch{}).Close(); !errors.Is(err, pgx.ErrTxClosed) {
				t.Fatalf("%d: SendBatch after the request: %v, want ErrTxClosed", i, err)
			}
		}
		if err := txs[1].Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("the savepoint's Rollback after the request: %v, want ErrTxClosed", err)
		}
	}
}

// TxOr gives a handler the request's transaction under a key, and the pool
// without one.
func TestIntegrationTxOr(t *testing.T) {
	store := pgtest.TxStore(t, nil)
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := pgtest.Pool(t)
	got := make(chan bool, 1)
	srv := httptest.NewServer(eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, isPool := pgstore.TxOr(r.Context(), pool).(*pgxpool.Pool)
		got <- isPool
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)
	for _, key := range []string{"txor-1", ""} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if isPool := <-got; isPool != (key == "") {
			t.Fatalf("key %q: TxOr gave the pool: %v", key, isPool)
		}
	}
}

// The two modes share a table: a key that one holds is in flight for the
// other, under many concurrent duplicates, and its record replays in both.
func TestIntegrationTxAndLeaseShareTable(t *testing.T) {
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	o := pgstore.Options{Schema: schema}
	if err := pgstore.Migrate(ctx, pool, &o); err != nil {
		t.Fatal(err)
	}
	txs, err := pgstore.NewTx(pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txs.Close)
	lease, err := pgstore.New(pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.Close)

	// duplicates sends n Acquires and n Begins of key at once and returns
	// how many took it.
	duplicates := func(key string, n int) (taken int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				_, token, err := lease.Acquire(ctx, key, time.Minute)
				if err == nil && token != "" {
					mu.Lock()
					taken++
					mu.Unlock()
				} else if !errors.Is(err, core.ErrInFlight) {
					t.Errorf("lease Acquire: %q, %v", token, err)
				}
			})
			wg.Go(func() {
				_, tx, err := txs.Begin(ctx, key, time.Minute)
				if err == nil && tx != nil {
					mu.Lock()
					taken++
					mu.Unlock()
					tx.Rollback(ctx) //nolint:errcheck // only counting
				} else if !errors.Is(err, core.ErrInFlight) {
					t.Errorf("tx Begin: %v, %v", tx, err)
				}
			})
		}
		wg.Wait()
		return taken
	}

	_, tx, err := txs.Begin(ctx, "held-by-tx", time.Minute)
	if err != nil || tx == nil {
		t.Fatalf("Begin: %v, %v", tx, err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck // after a failure: the pool closes only once it ends
	if n := duplicates("held-by-tx", 20); n != 0 {
		t.Fatalf("%d duplicates took a key the transactional mode holds", n)
	}
	if err := tx.Commit(ctx, []byte("record"), time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if rec, token, err := lease.Acquire(ctx, "held-by-tx", time.Minute); string(rec) != "record" || token != "" || err != nil {
		t.Fatalf("lease Acquire after the commit: %q, %q, %v", rec, token, err)
	}

	if _, token, err := lease.Acquire(ctx, "held-by-lease", time.Minute); token == "" || err != nil {
		t.Fatalf("lease Acquire: %q, %v", token, err)
	}
	if n := duplicates("held-by-lease", 20); n != 0 {
		t.Fatalf("%d duplicates took a key the lease mode holds", n)
	}
}

// urlWith returns the test database's URL with the query parameter param.
func urlWith(param string) string {
	url := pgtest.URL()
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

// With default_transaction_isolation at REPEATABLE READ, reads that follow
// an advisory lock still see what was committed before the lock was
// granted: LoadSteps, waiting for a running step, gets its checkpoint.
func TestIntegrationTxReadCommitted(t *testing.T) {
	ctx := context.Background()
	pool, schema := pgtest.PoolURL(t, urlWith("default_transaction_isolation=repeatable%20read"))
	o := pgstore.Options{Schema: schema}
	if err := pgstore.Migrate(ctx, pool, &o); err != nil {
		t.Fatal(err)
	}
	var iso string
	if err := pool.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&iso); err != nil || iso != "repeatable read" {
		t.Fatalf("default_transaction_isolation %q, %v", iso, err)
	}
	txs, err := pgstore.NewTx(pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txs.Close)

	_, tx, err := txs.Begin(ctx, "rr-key", time.Minute)
	if err != nil || tx == nil {
		t.Fatalf("Begin: %v, %v", tx, err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck // the pool closes only once it ends
	release, running := make(chan struct{}), make(chan struct{})
	stepDone := make(chan error, 1)
	go func() {
		_, err := tx.(core.StepTx).RunStep(ctx, "charge", time.Hour, func(context.Context) ([]byte, error) {
			close(running)
			<-release
			return []byte(`"ch_1"`), nil
		})
		stepDone <- err
	}()
	<-running
	loaded := make(chan map[string][]byte, 1)
	go func() {
		steps, err := txs.LoadSteps(ctx, "rr-key")
		if err != nil {
			t.Error(err)
		}
		loaded <- steps
	}()
	// LoadSteps waits for the step's lock (shared, where the step holds it
	// exclusive); then the step commits.
	for waiting := false; !waiting; {
		select {
		case steps := <-loaded:
			t.Fatalf("LoadSteps returned %q while the step ran", steps)
		default:
		}
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
	AND mode = 'ShareLock' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
	close(release)
	if err := <-stepDone; err != nil {
		t.Fatal(err)
	}
	if steps := <-loaded; string(steps["charge"]) != `"ch_1"` {
		t.Fatalf("LoadSteps after the step committed: %q, want its checkpoint", steps)
	}
}

// A transaction's commit does not write over a live record of its key:
// two TxStores on one table that spell it differently (Schema "" and the
// schema) do not share their advisory locks, so both may take a key, but
// the second to commit fails, and its writes are rolled back with it.
func TestIntegrationTxCommitKeepsLiveRecord(t *testing.T) {
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	o := pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(ctx, pool, &o); err != nil {
		t.Fatal(err)
	}
	a, err := pgstore.NewTx(pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	other, err := pgxpool.New(ctx, urlWith("search_path="+schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	b, err := pgstore.NewTx(other, &pgstore.Options{JanitorInterval: -1}) // the same table, through search_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	_, txA, err := a.Begin(ctx, "k", time.Minute)
	if err != nil || txA == nil {
		t.Fatalf("a: %v, %v", txA, err)
	}
	_, txB, err := b.Begin(ctx, "k", time.Minute)
	if err != nil || txB == nil {
		txA.Rollback(ctx) //nolint:errcheck
		t.Skipf("b: %v, %v: the locks are shared now; nothing left to check", txB, err)
	}
	table := pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()
	if _, err := pgstore.Tx(txB.Context(ctx)).Exec(ctx, "CREATE TABLE IF NOT EXISTS "+pgx.Identifier{schema, "b_writes"}.Sanitize()+" ()"); err != nil {
		t.Fatal(err)
	}
	if err := txA.Commit(ctx, []byte("record-a"), time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if err := txB.Commit(ctx, []byte("record-b"), time.Hour, false); err == nil {
		t.Error("b's commit wrote over a's live record")
	} else if !strings.Contains(err.Error(), "Options.Schema and Table alike") {
		t.Errorf("b's commit: %v; want the error that names the likely cause", err)
	}
	var rec []byte
	if err := pool.QueryRow(ctx, "SELECT record FROM "+table+" WHERE key = 'k'").Scan(&rec); err != nil || string(rec) != "record-a" {
		t.Errorf("record: %q, %v; want a's", rec, err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+".b_writes").Scan(&exists); err != nil || exists {
		t.Errorf("b's writes committed: %v, %v", exists, err)
	}
}

// A commit that fails at COMMIT with a division by zero of the handler's
// own (a deferred constraint trigger of its tables) is reported as that
// error, not as another store holding the key: only the record's statement
// divides by zero to refuse a live row.
func TestIntegrationTxCommitDeferredDivisionByZero(t *testing.T) {
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	o := pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(ctx, pool, &o); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.NewTx(pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ledger := pgx.Identifier{schema, "ledger"}.Sanitize()
	check := pgx.Identifier{schema, "ledger_check"}.Sanitize()
	for _, stmt := range []string{
		"CREATE TABLE " + ledger + " (amount int)",
		"CREATE FUNCTION " + check + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM 1 / 0; RETURN NULL; END $$",
		"CREATE CONSTRAINT TRIGGER ledger_check AFTER INSERT ON " + ledger +
			" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + check + "()",
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	_, tx, err := s.Begin(ctx, "k", time.Minute)
	if err != nil || tx == nil {
		t.Fatalf("Begin: %v, %v", tx, err)
	}
	if _, err := pgstore.Tx(tx.Context(ctx)).Exec(ctx, "INSERT INTO "+ledger+" VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	err = tx.Commit(ctx, []byte("record"), time.Hour, false)
	if err == nil {
		t.Fatal("commit succeeded; want the trigger's division by zero")
	}
	if strings.Contains(err.Error(), "another call stored the key's record") || !strings.Contains(err.Error(), "22012") {
		t.Fatalf("commit: %v; want the trigger's own error (SQLSTATE 22012)", err)
	}
}
