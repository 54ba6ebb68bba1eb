//go:build integration

package grpcidem_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/grpcidem/internal/testpb"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
	"github.com/idem-go/idem/redislock/redistest"
)

// TestIntegrationServer runs the server's suite on the real Redis at
// IDEM_REDIS_ADDR (default 127.0.0.1:6379), each store under a key prefix
// of its own, and on the PostgreSQL store at IDEM_PG_URL (see pgtest), in
// both its modes, each store in a schema of its own.
func TestIntegrationServer(t *testing.T) {
	t.Run("Redis", func(t *testing.T) { testServer(t, redistest.NewStore) })
	t.Run("PostgreSQL", func(t *testing.T) { testServer(t, pgtest.NewStore) })
	t.Run("PostgreSQLTx", func(t *testing.T) { testServer(t, pgtest.NewTxStore) })
}

// txOrders is a service whose Create inserts its order through the call's
// transaction (pgstore.Tx); item "internal" fails with Internal after the
// insert.
type txOrders struct {
	testpb.UnimplementedOrdersServer
	table string
	runs  atomic.Int64
}

func (s *txOrders) Create(ctx context.Context, req *testpb.CreateRequest) (*testpb.Order, error) {
	s.runs.Add(1)
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return nil, status.Error(codes.FailedPrecondition, "no transaction in the handler's context")
	}
	var id int64
	if err := tx.QueryRow(ctx, "INSERT INTO "+s.table+" (item) VALUES ($1) RETURNING id", req.Item).Scan(&id); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if req.Item == "internal" {
		return nil, status.Error(codes.Internal, "failed after the insert")
	}
	return &testpb.Order{Id: "ord_" + strconv.FormatInt(id, 10), Item: req.Item, Qty: req.Qty}, nil
}

// In pgstore's transactional mode the handler writes its order through the
// call's transaction: the order and the stored reply commit together, a
// replay does not run the handler, and an Internal error, or a commit that
// fails (Unavailable), keeps no order.
func TestIntegrationServerTx(t *testing.T) {
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	svc := &txOrders{table: pgx.Identifier{schema, "orders"}.Sanitize()}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+svc.table+" (id bigserial PRIMARY KEY, item text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	pg, err := pgstore.NewTx(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	store := &failingTx{TxStore: pg}
	eng, err := core.New(core.Config{Store: store, StoreTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, client: testpb.NewOrdersClient(serve(t, svc, grpcidem.UnaryServerInterceptor(eng)))}
	orders := func(item string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+svc.table+" WHERE item = $1", item).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	wantRuns := func(n int64) {
		t.Helper()
		if got := svc.runs.Load(); got != n {
			t.Fatalf("handler ran %d times, want %d", got, n)
		}
	}

	k := idemtest.Key(t)
	first := h.call(order("book", 2), key(k)...)
	wantOK(t, first)
	second := h.call(order("book", 2), key(k)...)
	wantOK(t, second)
	if !grpcidem.Replayed(second.header) || second.reply.Id != first.reply.Id {
		t.Fatalf("second call: %v, header %v; want the replay of %v", second.reply, second.header, first.reply)
	}
	wantRuns(1)
	if n := orders("book"); n != 1 {
		t.Fatalf("%d orders of the key, want 1", n)
	}

	k = idemtest.Key(t)
	for range 2 {
		if r := h.call(order("internal", 1), key(k)...); status.Code(r.err) != codes.Internal {
			t.Fatalf("call: %v, want Internal", r.err)
		}
	}
	wantRuns(3) // Internal is not stored: the retry ran again
	if n := orders("internal"); n != 0 {
		t.Fatalf("%d orders of calls that failed with Internal, want none", n)
	}

	k = idemtest.Key(t)
	store.fail.Store(true)
	wantRefusal(t, h.call(order("lost", 1), key(k)...), codes.Unavailable, grpcidem.ReasonStoreUnavailable, true)
	store.fail.Store(false)
	if n := orders("lost"); n != 0 {
		t.Fatalf("%d orders of a call whose commit failed, want none", n)
	}
	wantOK(t, h.call(order("lost", 1), key(k)...))
	wantRuns(5)
	if n := orders("lost"); n != 1 {
		t.Fatalf("%d orders after the retry, want 1", n)
	}
}

// failingTx is a core.TxStore whose commits roll back and fail while fail
// is set.
type failingTx struct {
	core.TxStore
	fail atomic.Bool
}

func (s *failingTx) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	rec, tx, err := s.TxStore.Begin(ctx, key, idle)
	if tx != nil && s.fail.Load() {
		tx = failedTx{tx}
	}
	return rec, tx, err
}

type failedTx struct{ core.Tx }

func (t failedTx) Commit(ctx context.Context, _ []byte, _ time.Duration, _ bool) error {
	t.Rollback(ctx) //nolint:errcheck // failing is the point
	return errors.New("commit failed")
}
