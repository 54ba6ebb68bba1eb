//go:build integration

package blackbox

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The store fault tests: three instances of the net/http example on a
// redis-server and a PostgreSQL of the test's own, concurrent clients
// sending every key twice at once and retrying it, and the store killed,
// stalled, flushed or restarted under them. Each counts the orders per key
// (GET /orders; each key is its order's item) and prints its figures.

const (
	// protectedAfter: every key first sent this long after Redis is ready
	// again must run exactly once (the target). The measured window
	// is printed.
	protectedAfter = 100 * time.Millisecond
	// pgProtectedAfter is protectedAfter after a PostgreSQL restart: the
	// pool's dead connections fail store calls (pgstore resets the pool at
	// most once a second), and the breaker waits its cooldown after each
	// (measured: up to 0.4 s).
	pgProtectedAfter = 2 * time.Second
	// initialLease is the Engine's lease of a new lock (LockTTL once
	// refreshed): how long a lock taken by a call that gave up may refuse
	// retries.
	initialLease = 10 * time.Second
	// every is how often a client sends a fresh key.
	every = 10 * time.Millisecond
)

// sinceMS formats t relative to ref in milliseconds.
func sinceMS(t, ref time.Time) time.Duration { return t.Sub(ref).Round(time.Millisecond) }

// Redis killed with SIGKILL and restarted empty, under the Redis store,
// fail-open and fail-closed: keys first sent once Redis is ready run once;
// the window from readiness to the first protected request is printed.
func TestFaultRedisRestart(t *testing.T) {
	bin := build(t, "nethttp")
	for _, failClosed := range []bool{false, true} {
		name := map[bool]string{false: "fail-open", true: "fail-closed"}[failClosed]
		t.Run(name, func(t *testing.T) {
			rds := startRedis(t)
			closed := ""
			if failClosed {
				closed = "1"
			}
			f := startFleet(t, bin, "REDIS_URL="+rds.url(), "DATABASE_URL=", "IDEM_FAIL_CLOSED="+closed)
			tr := newTraffic(f, 100*time.Millisecond)
			stop := tr.run(every, "restart", 5*time.Second)

			time.Sleep(time.Second)
			rds.kill()
			killed := time.Now() // after the kill: a key sent before it is in before
			time.Sleep(1500 * time.Millisecond)
			restarted := time.Now()
			probes := f.probes(5*time.Millisecond, restarted.Add(1500*time.Millisecond))
			ready := rds.start()
			pinged := rds.firstPing()
			time.Sleep(time.Until(ready.Add(1500 * time.Millisecond)))
			stop()
			ps := probes()
			tr.settle(time.Now().Add(initialLease+2*time.Second), 250*time.Millisecond)

			orders, keys := f.orders(), tr.all()
			before, outage, after := between(keys, time.Time{}, killed), between(keys, killed, ready), between(keys, ready.Add(protectedAfter), time.Now())
			t.Logf("Redis SIGKILL at +%v of the traffic, restarted %v later; ready (its log) %v after the restart command, first PING from the test %v after that",
				sinceMS(killed, keys[0].first), sinceMS(restarted, killed), sinceMS(ready, restarted), sinceMS(pinged, ready))
			t.Logf("window from readiness: %s", window(ps, ready))
			t.Logf("outage [kill, ready): %s; %s", runs(outage, orders), statuses(answers(outage, killed, ready)))
			t.Logf("after ready+%v: %s; %s", protectedAfter, runs(after, orders), statuses(answers(after, time.Time{}, time.Time{})))
			t.Logf("before the kill (their records and orders went with Redis's data): %s", runs(before, orders))
			t.Logf("all: %s; latency %s", statuses(answers(keys, time.Time{}, time.Time{})), latencies(answers(keys, time.Time{}, time.Time{})))

			checkProbes(t, ps, ready, protectedAfter, 0)
			checkOnce(t, "key first sent after readiness", after, orders)
			checkLateLocks(t, keys, ready, "readiness")
			if failClosed {
				// Refused while Redis was down, then run once.
				for _, k := range outage {
					for _, a := range k.answers {
						if a.done.Before(ready) && a.status != http.StatusServiceUnavailable {
							t.Errorf("key %s answered %d before Redis was ready, want 503", k.key, a.status)
						}
					}
				}
				checkOnce(t, "key first sent while Redis was down", outage, orders)
			} else {
				twice := 0
				for _, k := range outage {
					if len(orders[k.key]) > 1 {
						twice++
					}
				}
				t.Logf("fail-open: %d of %d keys sent while Redis was down ran more than once", twice, len(outage))
			}
		})
	}
}

// Redis stalled with SIGSTOP for 20 s, then SIGCONT, under the Redis store
// fail-closed: every request is answered within about StoreTimeout, and a
// lock that Redis takes at SIGCONT for a request that gave up refuses
// retries for the initial lease at most, not LockTTL.
//
// Fail-closed because the example keeps its orders in the same Redis:
// fail-open, its handler's own Redis calls would wait for go-redis's
// ReadTimeout, which is the application's, not idem's.
func TestFaultRedisStall(t *testing.T) {
	bin := build(t, "nethttp")
	rds := startRedis(t)
	f := startFleet(t, bin, "REDIS_URL="+rds.url(), "DATABASE_URL=", "IDEM_FAIL_CLOSED=1")
	tr := newTraffic(f, 250*time.Millisecond)
	warm := tr.run(every, "warm", 5*time.Second)
	time.Sleep(500 * time.Millisecond)
	warm() // no request in flight at SIGSTOP: the handler's own Redis calls would stall

	stopped := time.Now()
	rds.signal(syscall.SIGSTOP)
	stop := tr.run(100*time.Millisecond, "stall", 2*time.Second)
	time.Sleep(20 * time.Second)
	resumed := time.Now()
	probes := f.probes(5*time.Millisecond, resumed.Add(time.Second))
	rds.signal(syscall.SIGCONT)
	time.Sleep(time.Second)
	stop()
	ps := probes()
	tr.settle(resumed.Add(initialLease+5*time.Second), 500*time.Millisecond)

	orders, keys := f.orders(), tr.all()
	stall := between(keys, stopped, resumed)
	during := answers(keys, stopped, resumed)
	t.Logf("stall of %v: %s", sinceMS(resumed, stopped), statuses(during))
	t.Logf("latency of the requests sent during the stall: %s", latencies(during))
	t.Logf("window from SIGCONT: %s", window(ps, resumed))
	timedOut, lastStored := 0, time.Duration(0)
	for _, k := range stall {
		stored := time.Duration(-1)
		for _, a := range k.answers {
			switch {
			case a.status == http.StatusServiceUnavailable && a.latency() >= 900*time.Millisecond:
				timedOut++
			case a.status == http.StatusCreated && stored < 0:
				stored = a.done.Sub(resumed)
			}
		}
		if stored < 0 || stored > initialLease+3*time.Second {
			t.Errorf("key %s sent during the stall: stored %v after SIGCONT, want within the initial lease (%v) and a margin:\n%s",
				k.key, stored, initialLease, describe(k.answers, resumed))
		}
		lastStored = max(lastStored, stored)
	}
	t.Logf("%d keys sent during the stall, %d of their requests timed out in the store (503 after >= 900ms); every one stored within %v of SIGCONT",
		len(stall), timedOut, lastStored.Round(time.Millisecond))
	checkProbes(t, ps, resumed, protectedAfter, 0)
	checkLateLocks(t, keys, resumed, "SIGCONT")
	if n, _ := lateLocks(keys, resumed); n == 0 {
		t.Error("no late lock after SIGCONT: the test did not exercise the initial lease")
	}
	t.Logf("all: %s; %s", statuses(answers(keys, time.Time{}, time.Time{})), runs(keys, orders))
	if m := maxLatency(during); m >= 3*time.Second {
		t.Errorf("a request sent during the stall waited %v, want < 3s (StoreTimeout is 1s)", m)
	}
	checkOnce(t, "key", keys, orders)
}

// FLUSHALL under the tiered store (Redis in front of PostgreSQL), with
// traffic: every key completed before still replays its order, and none
// runs twice (unless PostgreSQL failed too: checkOnceFailOpen).
func TestFaultTieredFlush(t *testing.T) {
	bin := build(t, "nethttp")
	rds := startRedis(t)
	f := startFleet(t, bin, "REDIS_URL="+rds.url(), "DATABASE_URL="+postgresSchema(t), "IDEM_FAIL_CLOSED=")
	tr := newTraffic(f, 100*time.Millisecond)
	stop := tr.run(every, "flush", 5*time.Second)
	time.Sleep(time.Second)
	flushed := time.Now()
	if err := rds.client.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	stop()
	tr.settle(time.Now().Add(initialLease+2*time.Second), 250*time.Millisecond)

	// Every key stored before the flush, sent again on the three instances
	// at once: one of them writes the record back to Redis, under Redis's
	// lock of the key, which its duplicates meet (409); a 409 or a 503 is
	// retried.
	keys := tr.all()
	var completed []*keyRun
	for _, k := range keys {
		for _, a := range k.answers {
			if a.status == http.StatusCreated && a.done.Before(flushed) {
				completed = append(completed, k)
				break
			}
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var again, retried, last []answer
	for n, k := range completed {
		for i := range f.servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := f.send(n+i, k.key)
				tr.record(k, a)
				mu.Lock()
				again = append(again, a)
				mu.Unlock()
				for try := 0; (a.status == http.StatusConflict || a.status == http.StatusServiceUnavailable) && try < 10; try++ {
					time.Sleep(100 * time.Millisecond)
					a = f.send(n+i+1, k.key)
					tr.record(k, a)
					mu.Lock()
					retried = append(retried, a)
					mu.Unlock()
				}
				mu.Lock()
				last = append(last, a)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	orders, unprotected := f.orders(), f.metric(storeErrors)
	checkFewStoreErrors(t, "FLUSHALL", unprotected, len(answers(keys, time.Time{}, time.Time{})))
	checkReplays(t, "a key completed before the flush", last, unprotected)
	t.Logf("FLUSHALL at +%v of the traffic: %s; %s", sinceMS(flushed, keys[0].first), statuses(answers(keys, time.Time{}, time.Time{})), runs(keys, orders))
	t.Logf("the %d keys completed before the flush, sent again on the three instances at once: %s; the 409s retried: %s",
		len(completed), statuses(again), statuses(retried))
	checkOnceFailOpen(t, "key", keys, orders, unprotected)
}

// Redis killed and restarted, then stalled, under the tiered store,
// fail-open and fail-closed: the requests stay protected through
// PostgreSQL, nothing runs twice (fail-open: unless PostgreSQL failed too,
// checkOnceFailOpen), and the fallbacks are counted.
func TestFaultTieredRedisDown(t *testing.T) {
	bin := build(t, "nethttp")
	for _, failClosed := range []bool{false, true} {
		t.Run(map[bool]string{false: "fail-open", true: "fail-closed"}[failClosed], func(t *testing.T) {
			rds := startRedis(t)
			closed := ""
			if failClosed {
				closed = "1"
			}
			f := startFleet(t, bin, "REDIS_URL="+rds.url(), "DATABASE_URL="+postgresSchema(t), "IDEM_FAIL_CLOSED="+closed)
			tr := newTraffic(f, 100*time.Millisecond)
			stop := tr.run(every, "tiered", initialLease+5*time.Second)
			time.Sleep(time.Second)
			killed := time.Now()
			rds.kill()
			time.Sleep(1500 * time.Millisecond)
			ready := rds.start()
			time.Sleep(1500 * time.Millisecond)
			stalled := time.Now()
			rds.signal(syscall.SIGSTOP)
			time.Sleep(4 * time.Second)
			resumed := time.Now()
			rds.signal(syscall.SIGCONT)
			time.Sleep(time.Second)
			stop()
			tr.settle(resumed.Add(initialLease+5*time.Second), 250*time.Millisecond)
			// Redis back: every key replays, whichever tier stored it.
			again, conflicts := tr.resend(resumed.Add(initialLease + 5*time.Second))

			orders, keys := f.orders(), tr.all()
			fallbacks, unprotected := f.metric("idempotency_store_fallbacks_total"), f.metric(storeErrors)
			down, stall := answers(keys, killed, ready), answers(keys, stalled, resumed)
			t.Logf("Redis down for %v: %s; latency %s", sinceMS(ready, killed), statuses(down), latencies(down))
			t.Logf("Redis stalled for %v: %s; latency %s", sinceMS(resumed, stalled), statuses(stall), latencies(stall))
			t.Logf("every key sent again after SIGCONT: %s after %d answers 409 or 503 (retried)", statuses(again), conflicts)
			t.Logf("all: %s; %s; idempotency_store_fallbacks_total %v",
				statuses(answers(keys, time.Time{}, time.Time{})), runs(keys, orders), fallbacks)
			checkLateLocks(t, keys, resumed, "SIGCONT")
			checkFewStoreErrors(t, "Redis down", unprotected, len(answers(keys, time.Time{}, time.Time{})))
			if failClosed {
				unprotected = 0 // a store error is a 503: nothing ran
			}
			checkReplays(t, "a key sent again after SIGCONT", again, unprotected)
			if fallbacks == 0 {
				t.Error("idempotency_store_fallbacks_total is 0 after Redis was down")
			}
			if m := max(maxLatency(down), maxLatency(stall)); m >= 3*time.Second {
				t.Errorf("a request waited %v while Redis was down or stalled, want < 3s", m)
			}
			checkOnceFailOpen(t, "key", keys, orders, unprotected)
		})
	}
}

// storeErrors is the metric of the keyed requests that no tier answered in
// time: under fail-open each ran unprotected, under fail-closed each got 503.
const storeErrors = `idempotency_requests_total{method="POST",outcome="store_error",route="/orders"}`

// checkOnceFailOpen is checkOnce on a store that may fail under fail-open
// (PostgreSQL missing StoreTimeout on a busy machine), where unprotected
// requests ran after a store error, as documented: a key may run twice, and
// the extra runs may not outnumber those requests. Every key run once is
// checked as checkOnce does; with unprotected 0, every key.
func checkOnceFailOpen(t *testing.T, what string, keys []*keyRun, orders map[string][]string, unprotected float64) {
	t.Helper()
	var once []*keyRun
	extra := 0
	for _, k := range keys {
		if n := len(orders[k.key]); n > 1 {
			extra += n - 1
		} else {
			once = append(once, k)
		}
	}
	if unprotected > 0 {
		t.Logf("%s: %v requests ran unprotected after a store error (fail-open), %d extra runs", what, unprotected, extra)
	}
	if float64(extra) > unprotected {
		checkOnce(t, what, keys, orders)
		t.Errorf("%s: %d extra runs, more than the %v requests that ran unprotected", what, extra, unprotected)
		return
	}
	checkOnce(t, what, once, orders)
}

// checkFewStoreErrors fails the test if errs, the store errors counted
// while n requests were answered, exceed 2% of them: calls that miss
// StoreTimeout on a busy machine are that rare; a store that stays broken,
// or a tier that fails instead of falling back, answers many more.
func checkFewStoreErrors(t *testing.T, what string, errs float64, n int) {
	t.Helper()
	t.Logf("%s: %v store errors in %d requests", what, errs, n)
	if errs > float64(n)/50 {
		t.Errorf("%s: %v store errors in %d requests, want at most 2%%", what, errs, n)
	}
}

// checkReplays fails the test unless every answer of as (what: of which
// keys) is a replay. With requests run unprotected (fail-open, unprotected
// > 0) a fresh 201 passes too: a key whose every run was unprotected has no
// record and runs again, an extra run that checkOnceFailOpen counts.
func checkReplays(t *testing.T, what string, as []answer, unprotected float64) {
	t.Helper()
	for _, a := range as {
		if a.status == http.StatusCreated && (a.replay || unprotected > 0) {
			continue
		}
		t.Errorf("%s: %d replay=%v %v, want its replay", what, a.status, a.replay, a.err)
	}
}

// PostgreSQL stalled (a lock on idem's table) under the tiered store in the
// transactional mode: the keys taken meanwhile fall back to Redis's lock
// alone and run protected; PostgreSQL answering again by the time they
// complete, their records reach it too, and survive Redis losing its data:
// after FLUSHALL each key replays its order, none runs again.
func TestFaultTieredPostgresStall(t *testing.T) {
	bin := build(t, "nethttp")
	rds := startRedis(t)
	dbURL := postgresSchema(t)
	f := startFleet(t, bin, "REDIS_URL="+rds.url(), "DATABASE_URL="+dbURL)
	ctx := context.Background()
	stall := stallKeysTable(t, dbURL)
	const fallbacks = "idempotency_store_fallbacks_total"
	before := f.metric(fallbacks)
	keys, first := make([]string, 9), make([]answer, 9)
	var wg sync.WaitGroup
	for i := range keys {
		keys[i] = f.newKey("stall")
		wg.Add(1)
		go func() {
			defer wg.Done()
			first[i] = postOrder(f.client, f.servers[i%3].url, i%3, "faults", keys[i], 4000)
		}()
	}
	// Each key falls back to Redis's lock alone once PostgreSQL has missed
	// its half of StoreTimeout (1 s), well before the lock goes; each
	// handler runs for 4 s, and completes well after. (GET /metrics would
	// wait for PostgreSQL meanwhile: its stuck-keys gauge reads the table.)
	time.Sleep(1500 * time.Millisecond)
	if err := stall.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, a := range first {
		if a.status != http.StatusCreated || a.replay || a.err != nil {
			t.Fatalf("key %s during the stall: %d replay=%v %v", keys[i], a.status, a.replay, a.err)
		}
	}
	if n := f.metric(fallbacks) - before; n < float64(len(keys)) {
		t.Fatalf("%v fallbacks, want at least %d: PostgreSQL's stall did not reach the keys", n, len(keys))
	}
	if err := rds.client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	orders := f.orders()
	for i, key := range keys {
		a := postOrder(f.client, f.servers[(i+1)%3].url, (i+1)%3, "faults", key, 4000) // the same request
		if a.status != http.StatusCreated || !a.replay || a.id != first[i].id {
			t.Errorf("key %s after FLUSHALL: %d replay=%v order %s, want the replay of order %s", key, a.status, a.replay, a.id, first[i].id)
		}
		if n := len(orders[key]); n != 1 {
			t.Errorf("key %s: %d orders, want 1", key, n)
		}
	}
	if again := f.orders(); !maps.EqualFunc(again, orders, slices.Equal) {
		t.Errorf("orders after the resends: %v, want %v (a key ran again)", again, orders)
	}
}

// stallKeysTable locks idem's table in a transaction of its own, which
// the test rolls back to end the stall (or its cleanup does).
func stallKeysTable(t *testing.T, dbURL string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	stall, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stall.Rollback(ctx) }) //nolint:errcheck // ended by the test
	if _, err := stall.Exec(ctx, "LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return stall
}

// Redis loses its data (FLUSHALL), then PostgreSQL stalls (a lock on
// idem's table), under the tiered store and FailClosed: a completed key
// sent again finds Redis free and PostgreSQL silent. Redis's marker went
// with its data, so Redis's lock alone does not hold the key: 503, not a
// second order; once PostgreSQL answers, the key replays its order.
func TestFaultTieredFlushThenPostgresStall(t *testing.T) {
	bin := build(t, "nethttp")
	rds := startRedis(t)
	dbURL := postgresSchema(t)
	f := startFleet(t, bin, "REDIS_URL="+rds.url(), "DATABASE_URL="+dbURL, "IDEM_FAIL_CLOSED=1")
	keys, first := make([]string, 6), make([]answer, 6)
	for i := range keys {
		keys[i] = f.newKey("flushstall")
		if first[i] = postOrder(f.client, f.servers[i%3].url, i%3, "faults", keys[i], 0); first[i].status != http.StatusCreated {
			t.Fatalf("key %s: %d %v, want 201", keys[i], first[i].status, first[i].err)
		}
	}
	ctx := context.Background()
	if err := rds.client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	stall := stallKeysTable(t, dbURL)
	for i, key := range keys {
		if a := postOrder(f.client, f.servers[(i+1)%3].url, (i+1)%3, "faults", key, 0); a.status != http.StatusServiceUnavailable {
			t.Errorf("key %s after FLUSHALL, PostgreSQL stalled: %d replay=%v %v, want 503", key, a.status, a.replay, a.err)
		}
	}
	if err := stall.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	orders := f.orders()
	for i, key := range keys {
		a := postOrder(f.client, f.servers[(i+2)%3].url, (i+2)%3, "faults", key, 0)
		if a.status != http.StatusCreated || !a.replay || a.id != first[i].id {
			t.Errorf("key %s, PostgreSQL back: %d replay=%v order %s, want the replay of order %s", key, a.status, a.replay, a.id, first[i].id)
		}
		if n := len(orders[key]); n != 1 {
			t.Errorf("key %s: %d orders, want 1", key, n)
		}
	}
}

// PostgreSQL restarted (pg_ctl stop -m fast, start) under the tiered store
// and under the PostgreSQL store, fail-open and fail-closed: no panic, the
// policy holds during the outage, and keys sent once PostgreSQL is ready
// run once. The three run in parallel, each on its own cluster.
func TestFaultPostgresRestart(t *testing.T) {
	bin := build(t, "nethttp")
	for _, tc := range []struct {
		name              string
		tiered, failClose bool
	}{
		{"tiered", true, false},
		{"postgres-fail-open", false, false},
		{"postgres-fail-closed", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pg := startPostgres(t)
			env := []string{"DATABASE_URL=" + pg.url(), "REDIS_URL=", "IDEM_FAIL_CLOSED="}
			if tc.tiered {
				env[1] = "REDIS_URL=" + startRedis(t).url()
			}
			if tc.failClose {
				env[2] = "IDEM_FAIL_CLOSED=1"
			}
			f := startFleet(t, bin, env...)
			tr := newTraffic(f, 100*time.Millisecond)
			stop := tr.run(every, "pg", initialLease+5*time.Second)
			time.Sleep(time.Second)
			stopped := time.Now()
			pg.stop()
			down := time.Now()
			// The store errors (unprotected requests, or 503s) from here on,
			// and from a little before ready+pgProtectedAfter on: on a busy
			// machine a call may miss StoreTimeout although the stores are up.
			errsDown := f.metric(storeErrors)
			time.Sleep(time.Second)
			restarted := time.Now()
			probes := f.probes(5*time.Millisecond, restarted.Add(3500*time.Millisecond))
			ready, connected := pg.start()
			time.Sleep(time.Until(ready.Add(pgProtectedAfter - 100*time.Millisecond)))
			errsReady := f.metric(storeErrors)
			time.Sleep(time.Until(ready.Add(pgProtectedAfter + time.Second)))
			stop()
			ps := probes()
			tr.settle(time.Now().Add(initialLease+2*time.Second), 250*time.Millisecond)

			// Keys sent before pg_ctl stop returned may have been in flight
			// when their sessions ended: if one's order committed and its
			// Complete failed, its lock lives on for the initial lease, and
			// a retry after it runs it again. Reported, not checked.
			orders, keys := f.orders(), tr.all()
			inFlight, outage := between(keys, time.Time{}, down), between(keys, down, ready)
			recovery, after := between(keys, ready, ready.Add(pgProtectedAfter)), between(keys, ready.Add(pgProtectedAfter), time.Now())
			t.Logf("pg_ctl stop -m fast at +%v took %v; down %v; ready (its log) %v after the start command, first connection from the test %v after that",
				sinceMS(stopped, keys[0].first), sinceMS(down, stopped), sinceMS(restarted, down), sinceMS(ready, restarted), sinceMS(connected, ready))
			t.Logf("window from readiness: %s", window(ps, ready))
			t.Logf("outage [stopped, ready): %s; %s", runs(outage, orders), statuses(answers(keys, down, ready)))
			t.Logf("first sent in [ready, ready+%v): %s; after: %s; %s", pgProtectedAfter, runs(recovery, orders), runs(after, orders),
				statuses(answers(after, time.Time{}, time.Time{})))
			t.Logf("sent before PostgreSQL had stopped: %s", runs(inFlight, orders))
			t.Logf("all: %s; latency %s", statuses(answers(keys, time.Time{}, time.Time{})), latencies(answers(keys, time.Time{}, time.Time{})))

			errs := f.metric(storeErrors)
			late := errs - errsReady
			checkFewStoreErrors(t, "PostgreSQL back", late, len(answers(keys, ready.Add(pgProtectedAfter-100*time.Millisecond), time.Time{})))
			checkProbes(t, ps, ready, pgProtectedAfter, int(late))
			if tc.failClose {
				late = 0 // a store error is a 503: nothing ran
			}
			checkOnceFailOpen(t, "key first sent after readiness", after, orders, late)
			checkLateLocks(t, keys, ready, "readiness")
			for _, a := range answers(keys, down, ready) {
				switch {
				case a.err != nil:
					t.Errorf("while PostgreSQL was down: %v", a.err)
				case tc.failClose && a.done.Before(ready) && a.status != http.StatusServiceUnavailable:
					t.Errorf("fail-closed, while PostgreSQL was down: %d, want 503", a.status)
				}
			}
			switch {
			case tc.failClose: // nothing runs
				checkOnce(t, "key first sent while PostgreSQL was down", outage, orders)
				checkOnce(t, "key first sent while PostgreSQL was coming back", recovery, orders)
			case tc.tiered: // Redis holds the locks meanwhile
				checkFewStoreErrors(t, "PostgreSQL down", errs-errsDown, len(answers(keys, down, time.Time{})))
				checkOnceFailOpen(t, "key first sent while PostgreSQL was down or coming back",
					slices.Concat(outage, recovery), orders, errs-errsDown)
			}
		})
	}
}
