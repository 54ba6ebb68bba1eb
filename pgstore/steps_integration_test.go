//go:build integration

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// stepsApp is an Engine on the transactional store and a table, rows,
// that the tests' steps and work insert into.
type stepsApp struct {
	eng    *core.Engine
	store  *pgstore.TxStore
	pool   *pgxpool.Pool
	schema string
	rows   string
}

func newStepsApp(t *testing.T, url string, instrumented bool) *stepsApp {
	t.Helper()
	ctx := context.Background()
	pool, schema := pgtest.PoolURL(t, url)
	o := pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(ctx, pool, &o); err != nil {
		t.Fatal(err)
	}
	a := &stepsApp{pool: pool, schema: schema, rows: pgx.Identifier{schema, "rows"}.Sanitize()}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+a.rows+" (kind text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	var err error
	if a.store, err = pgstore.NewTx(pool, &o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.store.Close)
	var store core.Store = a.store
	if instrumented { // as metrics do: Step finds the StepTx behind the wrapper
		store = instrument.Store(store, func(context.Context, instrument.Op, time.Duration, error, int) {})
	}
	if a.eng, err = core.New(core.Config{Store: store}); err != nil {
		t.Fatal(err)
	}
	return a
}

// stepsLock is the advisory lock of the steps of the key of scope and key.
func (a *stepsApp) stepsLock(scope, key string) string {
	return "idem-go/idem steps " + pgx.Identifier{a.schema, pgstore.DefaultTable}.Sanitize() + " " + core.ID(scope, key, "")
}

// killStep terminates the session of the step that holds lock, and the
// key's (keyPID), if not 0: as a PostgreSQL restart does.
func (a *stepsApp) killStep(ctx context.Context, lock string, keyPID uint32) error {
	var stepPID uint32
	if err := a.pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND (classid::bigint << 32 | objid::bigint) = hashtextextended($1, 0)`, lock).Scan(&stepPID); err != nil {
		return err
	}
	for _, pid := range []uint32{stepPID, keyPID} {
		if pid == 0 {
			continue
		}
		if _, err := a.pool.Exec(ctx, "SELECT pg_terminate_backend($1, 10000)", pid); err != nil {
			return err
		}
	}
	return nil
}

// count returns the rows of kind.
func (a *stepsApp) count(t *testing.T, kind string) int {
	t.Helper()
	var n int
	if err := a.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+a.rows+" WHERE kind = $1", kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// insert inserts a row of kind through the transaction of ctx.
func (a *stepsApp) insert(ctx context.Context, kind string) error {
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return errors.New("no transaction in the context")
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+a.rows+" (kind) VALUES ($1)", kind)
	return err
}

// In the transactional mode, a step's writes commit with its checkpoint in
// a transaction of their own: the work failing after it rolls back its own
// writes, not the step's; the retry skips the step and commits the rest
// with the record; the checkpoints go with the commit.
func TestIntegrationTxSteps(t *testing.T) {
	t.Parallel()
	for _, instrumented := range []bool{false, true} {
		testTxSteps(t, newStepsApp(t, pgtest.URL(), instrumented))
	}
}

func testTxSteps(t *testing.T, a *stepsApp) {
	ctx := context.Background()
	work := func(failAfterCharge bool) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			keyTx := pgstore.Tx(ctx)
			ch, err := core.Step(ctx, "charge", func(ctx context.Context) (string, error) {
				if pgstore.Tx(ctx) == keyTx {
					return "", errors.New("the step writes through the key's transaction")
				}
				return "ch_1", a.insert(ctx, "charge")
			})
			if err != nil {
				return "", err
			}
			if err := a.insert(ctx, "response"); err != nil {
				return "", err
			}
			if failAfterCharge {
				return "", errors.New("crash after the charge")
			}
			n, err := core.Step(ctx, "record", func(ctx context.Context) (int, error) { return 7, a.insert(ctx, "record") })
			if err != nil {
				return "", err
			}
			return ch + " " + string(rune('0'+n)), nil
		}
	}
	if _, _, err := core.Do(ctx, a.eng, "s", "k", work(true)); err == nil || err.Error() != "crash after the charge" {
		t.Fatalf("first run: %v", err)
	}
	if c, r := a.count(t, "charge"), a.count(t, "response"); c != 1 || r != 0 {
		t.Fatalf("after the failed run: %d charges, %d responses; want the step's 1 and the rolled back 0", c, r)
	}
	got, replayed, err := core.Do(ctx, a.eng, "s", "k", work(false))
	if err != nil || replayed || got != "ch_1 7" {
		t.Fatalf("retry: %q, %v, %v", got, replayed, err)
	}
	if c, r, rec := a.count(t, "charge"), a.count(t, "response"), a.count(t, "record"); c != 1 || r != 1 || rec != 1 {
		t.Fatalf("after the retry: %d charges, %d responses, %d records; want 1 each", c, r, rec)
	}
	if steps, err := a.store.LoadSteps(ctx, core.ID("s", "k", "")); err != nil || len(steps) != 0 {
		t.Fatalf("checkpoints after the commit: %q, %v", steps, err)
	}
}

// Every handler in a step holds its key's connection and needs another:
// the TxStores on a pool, here two on two tables, hold one key fewer than
// the pool has connections, so that concurrent requests on a small pool
// all run their steps rather than each wait for a connection that another
// holds.
func TestIntegrationTxStepsSmallPool(t *testing.T) {
	t.Parallel()
	a := newStepsApp(t, urlWith("pool_max_conns=2"), false)
	o := pgstore.Options{Schema: a.schema, Table: "other_keys", JanitorInterval: -1}
	if err := pgstore.Migrate(context.Background(), a.pool, &o); err != nil {
		t.Fatal(err)
	}
	other, err := pgstore.NewTx(a.pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var engines [2]*core.Engine
	for i, store := range []*pgstore.TxStore{a.store, other} {
		if engines[i], err = core.New(core.Config{Store: store, StoreTimeout: 10 * time.Second, FailClosed: true}); err != nil {
			t.Fatal(err)
		}
	}
	const requests = 8
	var (
		running, most atomic.Int32
		wg            sync.WaitGroup
		errs          = make(chan error, requests)
	)
	for i := range requests {
		wg.Go(func() {
			_, _, err := core.Do(context.Background(), engines[i%2], "s", strconv.Itoa(i), func(ctx context.Context) (string, error) {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// Let another request take the pool's second connection
				// if it can (a weaker check if it is slow, never a wrong one).
				for deadline := time.Now().Add(200 * time.Millisecond); a.pool.Stat().AcquiredConns() < 2 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				return core.Step(ctx, "charge", func(ctx context.Context) (string, error) { return "ch", a.insert(ctx, "charge") })
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := a.count(t, "charge"); n != requests {
		t.Errorf("%d charges, want %d", n, requests)
	}
	if n := most.Load(); n != 1 {
		t.Errorf("%d handlers held keys at once on a pool of 2 connections, want 1", n)
	}
}

// On a pool of one connection, which the key holds, a step fails at once
// and says why.
func TestIntegrationTxStepsOneConn(t *testing.T) {
	t.Parallel()
	a := newStepsApp(t, urlWith("pool_max_conns=1"), false)
	_, _, err := core.Do(context.Background(), a.eng, "s", "k", func(ctx context.Context) (string, error) {
		return core.Step(ctx, "charge", func(ctx context.Context) (string, error) { return "ch", a.insert(ctx, "charge") })
	})
	if err == nil || !strings.Contains(err.Error(), "pool_max_conns") || a.count(t, "charge") != 0 {
		t.Fatalf("a step on a pool of one connection: %v, %d charges", err, a.count(t, "charge"))
	}
}

// A step whose request ends while it runs (the client went away after a
// charge at another service) still commits its checkpoint: the retry does
// not charge again.
func TestIntegrationTxStepOutlivesRequest(t *testing.T) {
	t.Parallel()
	a := newStepsApp(t, pgtest.URL(), false)
	var charges atomic.Int32 // at the other service: not rolled back
	charge := func(cancel context.CancelFunc) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			return core.Step(ctx, "charge", func(ctx context.Context) (string, error) {
				charges.Add(1)
				if cancel != nil {
					cancel() // the request ends, the charge is done
				}
				return "ch_1", nil
			})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	core.Do(ctx, a.eng, "s", "k", charge(cancel)) //nolint:errcheck // stored or not, the charge must not run again
	got, _, err := core.Do(context.Background(), a.eng, "s", "k", charge(nil))
	if err != nil || got != "ch_1" {
		t.Fatalf("retry: %q, %v", got, err)
	}
	if n := charges.Load(); n != 1 {
		t.Fatalf("%d charges, want 1: the checkpoint was lost with the request", n)
	}
}

// A step of a transaction that lost its key (its connection died) is
// refused; a retry's LoadSteps waits for a step's transaction that holds
// the lock of the key's steps, and sees what it committed.
func TestIntegrationTxStepFenced(t *testing.T) {
	t.Parallel()
	a := newStepsApp(t, pgtest.URL(), false)
	ctx := context.Background()
	pool := a.pool
	_, _, err := core.Do(ctx, a.eng, "s", "k", func(ctx context.Context) (int, error) {
		var pid uint32
		if err := pgstore.Tx(ctx).QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return 0, err
		}
		// pg_terminate_backend signals the backend, which releases its
		// locks when it has exited.
		if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1, 10000)", pid); err != nil {
			return 0, err
		}
		return core.Step(ctx, "charge", func(ctx context.Context) (int, error) { return 1, a.insert(ctx, "charge") })
	})
	if !errors.Is(err, core.ErrLockLost) || a.count(t, "charge") != 0 {
		t.Fatalf("a step after the key's transaction died: %v, %d charges; want ErrLockLost and none", err, a.count(t, "charge"))
	}

	// A step's transaction in flight: the lock of the key's steps held,
	// the checkpoint written, not yet committed.
	id := core.ID("s", "k2", "")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	lock := a.stepsLock("s", "k2")
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", lock); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{a.schema, pgstore.DefaultTable + "_steps"}.Sanitize()+
		" (key, step, result, expires_at) VALUES ($1, 'charge', '\"ch_1\"', now() + interval '1 hour')", id); err != nil {
		t.Fatal(err)
	}
	loaded := make(chan map[string][]byte, 1)
	go func() {
		steps, err := a.store.LoadSteps(ctx, id)
		if err != nil {
			t.Error(err)
		}
		loaded <- steps
	}()
	select {
	case steps := <-loaded:
		t.Fatalf("LoadSteps returned %q while a step's transaction held the lock", steps)
	case <-time.After(100 * time.Millisecond): // a weaker check if it had not started, never a wrong one
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if steps := <-loaded; string(steps["charge"]) != `"ch_1"` {
		t.Fatalf("LoadSteps after the step committed: %q", steps)
	}
}

// A step's session that dies while the step calls another service (a
// terminated backend, an idle timeout, PostgreSQL restarting) does not
// lose the checkpoint of a step that wrote nothing through it: it is saved
// on another connection, while the key's transaction still holds the key
// or once no one does, and the retry does not charge again.
func TestIntegrationTxStepSessionLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		keyLost bool // the key's session dies too
	}{{"step's session", false}, {"both sessions", true}} {
		t.Run(tc.name, func(t *testing.T) {
			a := newStepsApp(t, pgtest.URL(), false)
			ctx := context.Background()
			var charges atomic.Int32 // at the other service
			work := func(ctx context.Context) (string, error) {
				var keyPID uint32
				if tc.keyLost {
					if err := pgstore.Tx(ctx).QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&keyPID); err != nil {
						return "", err
					}
				}
				return core.Step(ctx, "charge", func(ctx context.Context) (string, error) {
					if charges.Add(1) == 1 {
						if err := a.killStep(ctx, a.stepsLock("s", "k"), keyPID); err != nil {
							return "", err
						}
					}
					return "ch_1", nil
				})
			}
			got, _, err := core.Do(ctx, a.eng, "s", "k", work)
			if tc.keyLost {
				if err == nil {
					t.Fatalf("with the key's session gone: %q, want an error", got)
				}
				got, _, err = core.Do(ctx, a.eng, "s", "k", work)
			}
			if err != nil || got != "ch_1" {
				t.Fatalf("Do: %q, %v", got, err)
			}
			if n := charges.Load(); n != 1 {
				t.Fatalf("%d charges, want 1: the checkpoint was lost with the step's session", n)
			}
		})
	}
}

// A step whose sessions died (PostgreSQL restarted) while a duplicate took
// the key, ran and completed it saves no checkpoint under the completed key:
// it would outlive the record, and a run of the key after the record
// expired would skip the step and answer a charge it never made.
func TestIntegrationTxStepSessionLostKeyTaken(t *testing.T) {
	t.Parallel()
	a := newStepsApp(t, pgtest.URL(), false)
	ctx := context.Background()
	var charges atomic.Int32
	var work func(ctx context.Context) (string, error)
	work = func(ctx context.Context) (string, error) {
		var keyPID uint32
		if err := pgstore.Tx(ctx).QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&keyPID); err != nil {
			return "", err
		}
		return core.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			n := charges.Add(1)
			if n == 1 {
				if err := a.killStep(ctx, a.stepsLock("s", "k"), keyPID); err != nil {
					return "", err
				}
				// The client gave up; its retry runs to the end meanwhile.
				if got, _, err := core.Do(context.Background(), a.eng, "s", "k", work); err != nil || got != "ch_2" {
					return "", fmt.Errorf("the duplicate: %q, %v", got, err)
				}
			}
			return "ch_" + strconv.Itoa(int(n)), nil
		})
	}
	if got, _, err := core.Do(ctx, a.eng, "s", "k", work); !errors.Is(err, core.ErrLockLost) {
		t.Fatalf("the first call: %q, %v; want ErrLockLost", got, err)
	}
	var rows int
	if err := a.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{a.schema, pgstore.DefaultTable + "_steps"}.Sanitize()).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d checkpoints under the completed key, want none", rows)
	}
}
