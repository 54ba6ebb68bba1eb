package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/pgstore"
)

// lazyPool is a pool that has not connected: pgxpool connects on first
// use, and these tests use none.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	if _, err := pgstore.New(nil, nil); !errors.Is(err, pgstore.ErrNilPool) {
		t.Fatalf("New(nil) = %v, want ErrNilPool", err)
	}
	if err := pgstore.Migrate(context.Background(), nil, nil); !errors.Is(err, pgstore.ErrNilPool) {
		t.Fatalf("Migrate(nil) = %v, want ErrNilPool", err)
	}
	pool := lazyPool(t)
	for name, o := range map[string]pgstore.Options{
		"negative Timeout":      {Timeout: -time.Second},
		"negative JanitorBatch": {JanitorBatch: -1},
		"negative StaleLockAge": {StaleLockAge: -time.Second},
		// A bare number is nanoseconds: a sweep, on a new connection, as
		// fast as PostgreSQL accepts them.
		"nanosecond JanitorInterval": {JanitorInterval: 60},
		"long table name":            {Table: "a_table_name_much_longer_than_forty_bytes_x"},
		"another's steps table":      {Table: "orders_keys_steps"},
		"another's quota table":      {Table: "orders_keys_quota"},
	} {
		if _, err := pgstore.New(pool, &o); !errors.Is(err, pgstore.ErrInvalidOptions) {
			t.Errorf("%s: New = %v, want ErrInvalidOptions", name, err)
		}
		if err := pgstore.Migrate(context.Background(), pool, &o); !errors.Is(err, pgstore.ErrInvalidOptions) {
			t.Errorf("%s: Migrate = %v, want ErrInvalidOptions", name, err)
		}
	}
	// The message says whose table the name would be, and what to do.
	_, err := pgstore.New(pool, &pgstore.Options{Table: "orders_keys_steps"})
	want := `pgstore: invalid options: table name "orders_keys_steps" ends in "_steps", ` +
		`as the checkpoints' table of the store with Table "orders_keys" does (Migrate creates <Table>_steps): choose a name without it`
	if err == nil || err.Error() != want {
		t.Errorf("New = %v, want %s", err, want)
	}
	if _, err := pgstore.NewInbox(pool, &pgstore.InboxOptions{Table: "events_quota"}); !errors.Is(err, pgstore.ErrInvalidOptions) {
		t.Errorf("NewInbox = %v, want ErrInvalidOptions, as InboxOptions.Table says", err)
	}
}

// TestStoreErrorsWithoutPostgres: every operation on an unreachable
// PostgreSQL returns a "pgstore: <op>:" error, without panicking, within
// Options.Timeout; Close stops a janitor that never reached it.
func TestStoreErrorsWithoutPostgres(t *testing.T) {
	t.Parallel()
	s, err := pgstore.New(lazyPool(t), &pgstore.Options{Timeout: 2 * time.Second, JanitorInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	_, _, err = s.Acquire(ctx, "ab", time.Minute)
	checks := map[string]error{
		"acquire":  err,
		"complete": s.Complete(ctx, "ab", "t", []byte("r"), time.Minute),
		"release":  s.Release(ctx, "ab", "t"),
		"refresh":  s.Refresh(ctx, "ab", "t", time.Minute),
	}
	for op, err := range checks {
		if err == nil || !strings.HasPrefix(err.Error(), "pgstore: "+op+":") {
			t.Errorf("%s: %v, want a pgstore: %s: error", op, err, op)
		}
	}
	if _, err := s.Sweep(ctx); err == nil {
		t.Error("Sweep without PostgreSQL: no error")
	}
}

func TestInboxErrors(t *testing.T) {
	t.Parallel()
	if _, err := pgstore.NewInbox(nil, nil); !errors.Is(err, pgstore.ErrNilPool) {
		t.Fatalf("NewInbox(nil) = %v, want ErrNilPool", err)
	}
	if err := pgstore.MigrateInbox(context.Background(), nil, nil); !errors.Is(err, pgstore.ErrNilPool) {
		t.Fatalf("MigrateInbox(nil) = %v, want ErrNilPool", err)
	}
	in, err := pgstore.NewInbox(lazyPool(t), &pgstore.InboxOptions{Table: "events"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Process(context.Background(), "", nil); !errors.Is(err, pgstore.ErrEmptyEventID) {
		t.Fatalf("Process without an id: %v", err)
	}
	applied, err := in.Process(context.Background(), "ev", nil)
	if applied || err == nil || !strings.HasPrefix(err.Error(), "pgstore: inbox: ") {
		t.Fatalf("Process without PostgreSQL: %v, %v", applied, err)
	}
}
