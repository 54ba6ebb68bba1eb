//go:build integration

package pgstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// newInbox migrates an inbox and an accounts table into a schema of the
// test's own; it returns the inbox, the pool and a function reading an
// account's balance.
func newInbox(t *testing.T, opts *pgstore.InboxOptions) (*pgstore.Inbox, *pgxpool.Pool, string, func(string) int64) {
	t.Helper()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	o := pgstore.InboxOptions{}
	if opts != nil {
		o = *opts
	}
	o.Schema = schema
	if err := pgstore.MigrateInbox(ctx, pool, &o); err != nil {
		t.Fatal(err)
	}
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (account text PRIMARY KEY, balance bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	in, err := pgstore.NewInbox(pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	balance := func(account string) int64 {
		t.Helper()
		var b int64
		err := pool.QueryRow(ctx, "SELECT balance FROM "+accounts+" WHERE account = $1", account).Scan(&b)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		return b
	}
	return in, pool, accounts, balance
}

// credit returns an effect adding amount to account, through tx.
func credit(accounts, account string, amount int64, runs *atomic.Int64) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		runs.Add(1)
		_, err := tx.Exec(ctx, "INSERT INTO "+accounts+" (account, balance) VALUES ($1, $2) "+
			"ON CONFLICT (account) DO UPDATE SET balance = "+accounts+".balance + EXCLUDED.balance", account, amount)
		return err
	}
}

func TestIntegrationInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, pool, accounts, balance := newInbox(t, &pgstore.InboxOptions{Table: "inbox"})
	var runs atomic.Int64

	applied, err := in.Process(ctx, "ev-1", credit(accounts, "alice", 10, &runs))
	if !applied || err != nil || balance("alice") != 10 {
		t.Fatalf("first: %v, %v, balance %d", applied, err, balance("alice"))
	}
	applied, err = in.Process(ctx, "ev-1", credit(accounts, "alice", 10, &runs))
	if applied || err != nil || runs.Load() != 1 || balance("alice") != 10 {
		t.Fatalf("duplicate: %v, %v, %d runs, balance %d", applied, err, runs.Load(), balance("alice"))
	}

	// An error of fn rolls the effect and the mark back: a redelivery
	// applies the event.
	boom := errors.New("boom")
	applied, err = in.Process(ctx, "ev-2", func(ctx context.Context, tx pgx.Tx) error {
		if err := credit(accounts, "alice", 5, &runs)(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if applied || !errors.Is(err, boom) || balance("alice") != 10 {
		t.Fatalf("failing fn: %v, %v, balance %d", applied, err, balance("alice"))
	}
	// So does a panic, which goes on up.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic of fn did not go on up")
			}
		}()
		in.Process(ctx, "ev-2", func(ctx context.Context, tx pgx.Tx) error {
			credit(accounts, "alice", 5, &runs)(ctx, tx)
			panic("in fn")
		})
	}()
	if balance("alice") != 10 {
		t.Fatalf("balance %d after a panic, want 10", balance("alice"))
	}
	if applied, err := in.Process(ctx, "ev-2", credit(accounts, "alice", 5, &runs)); !applied || err != nil || balance("alice") != 15 {
		t.Fatalf("redelivery: %v, %v, balance %d", applied, err, balance("alice"))
	}
	if _, err := in.Process(ctx, "", credit(accounts, "alice", 5, &runs)); !errors.Is(err, pgstore.ErrEmptyEventID) {
		t.Fatalf("empty id: %v", err)
	}
	var marks int
	pool.QueryRow(ctx, "SELECT count(*) FROM "+strings.Replace(accounts, `"accounts"`, `"inbox"`, 1)).Scan(&marks)
	if marks != 2 {
		t.Fatalf("%d marks in the inbox, want 2", marks)
	}
}

// TestIntegrationInboxConcurrent: duplicates of each event processed at
// once (the first slow, so that they meet) apply it once; distinct events
// on one account all apply.
func TestIntegrationInboxConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _, accounts, balance := newInbox(t, nil)
	const events, dups = 20, 10
	var (
		wg      sync.WaitGroup
		runs    atomic.Int64
		applied atomic.Int64
	)
	start := make(chan struct{})
	var arrived [events]sync.WaitGroup // each event's duplicates, once they call Process
	for e := range events {
		arrived[e].Add(dups)
		for range dups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				arrived[e].Done()
				ok, err := in.Process(ctx, "ev-"+strconv.Itoa(e), func(ctx context.Context, tx pgx.Tx) error {
					arrived[e].Wait() // the duplicates wait on the mark meanwhile
					return credit(accounts, "bob", int64(e+1), &runs)(ctx, tx)
				})
				if err != nil {
					t.Errorf("event %d: %v", e, err)
				}
				if ok {
					applied.Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	want := int64(events * (events + 1) / 2)
	if applied.Load() != events || runs.Load() != events || balance("bob") != want {
		t.Fatalf("%d applied, %d runs, balance %d; want %d, %d, %d", applied.Load(), runs.Load(), balance("bob"), events, events, want)
	}
}

// A duplicate that waits on the first one's mark is skipped once the first
// commits, whatever the server's default_transaction_isolation: under
// REPEATABLE READ and SERIALIZABLE, PostgreSQL refuses the duplicate's
// insert of a mark committed after its snapshot (serialization_failure).
func TestIntegrationInboxIsolation(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{"repeatable read", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, schema := pgtest.PoolURL(t, urlWith("default_transaction_isolation="+strings.ReplaceAll(iso, " ", "%20")))
			opts := &pgstore.InboxOptions{Schema: schema}
			if err := pgstore.MigrateInbox(ctx, pool, opts); err != nil {
				t.Fatal(err)
			}
			in, err := pgstore.NewInbox(pool, opts)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			release, done := make(chan struct{}), make(chan error, 1)
			go func() {
				_, err := in.Process(ctx, "ev-1", func(context.Context, pgx.Tx) error {
					runs.Add(1)
					<-release
					return nil
				})
				done <- err
			}()
			// Once the first holds its mark, the duplicate waits on it.
			var dup struct {
				applied bool
				err     error
			}
			dupDone := make(chan struct{})
			for runs.Load() == 0 {
				select {
				case err := <-done:
					t.Fatalf("the first Process ended before its fn ran: %v", err)
				default:
					runtime.Gosched()
				}
			}
			go func() {
				defer close(dupDone)
				dup.applied, dup.err = in.Process(ctx, "ev-1", func(context.Context, pgx.Tx) error { runs.Add(1); return nil })
			}()
		wait:
			for waiting := false; !waiting; {
				select {
				case <-dupDone: // did not wait: the check below says why
					break wait
				default:
				}
				err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%')", schema).Scan(&waiting)
				if err != nil {
					t.Fatal(err)
				}
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			<-dupDone
			if dup.applied || dup.err != nil || runs.Load() != 1 {
				t.Fatalf("duplicate: applied %v, err %v, %d runs; want false, nil, 1", dup.applied, dup.err, runs.Load())
			}
		})
	}
}
