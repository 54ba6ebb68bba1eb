//go:build integration

package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
)

// RunID names the server: INFO's run_id and master_replid, another after a
// restart.
func TestIntegrationRunID(t *testing.T) {
	srv := startRedisServer(t)
	client := srv.client(t)
	store := mustNew(t, client, nil)
	ctx := context.Background()
	id, err := store.RunID(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	run, replid, _ := strings.Cut(id, " ")
	repl, err := client.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if run == "" || replid == "" || !strings.Contains(info, "run_id:"+run) || !strings.Contains(repl, "master_replid:"+replid) {
		t.Fatalf("RunID %q, INFO server:\n%s\nINFO replication:\n%s", id, info, repl)
	}
	srv.stop()
	srv.start()
	again, err := store.RunID(ctx, "k")
	if err != nil || again == "" || again == id {
		t.Fatalf("RunID after a restart: %q, %v; want another than %q", again, err, id)
	}
}

// switchable is a durable tier that a test takes out of reach.
type switchable struct {
	core.Store
	down atomic.Bool
}

func (s *switchable) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	if s.down.Load() {
		return nil, "", errors.New("durable tier down")
	}
	return s.Store.Acquire(ctx, key, ttl)
}

// The tiered store over a redis-server of the test's own: Redis back from
// a restart with older data (its RDB snapshot, taken before a key
// completed) has the tiered store's marker but not the key's record. The
// marker's run_id tells: under FailClosed, the durable tier out of reach,
// the key does not run again on Redis's lock alone. The calls but the
// key's first have a TTL of a microsecond, so that a marker of the same
// server is old enough for them.
func TestIntegrationTieredRestartFromSnapshot(t *testing.T) {
	srv := startRedisServer(t)
	client := srv.client(t)
	durable := &switchable{Store: core.NewMemoryStore(0)}
	eng, err := core.New(core.Config{Store: core.NewTiered(mustNew(t, client, nil), durable), FailClosed: true, Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(key string) (*core.Lease, error) {
		l, rec, err := eng.Acquire(&core.Call{Key: key, TTL: time.Microsecond})
		if rec != nil {
			t.Fatalf("key %s: a replay", key)
		}
		return l, err
	}
	l, err := call("first") // writes the marker
	if err != nil {
		t.Fatal(err)
	}
	l.Complete(&core.Record{Code: 201})
	ctx := context.Background()
	if err := client.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if l, _, err = eng.Acquire(&core.Call{Key: "k"}); l == nil {
		t.Fatal(err)
	}
	l.Complete(&core.Record{Code: 201}) // in both tiers, after the snapshot, for ResponseTTL

	durable.down.Store(true)
	if l, err = call("new"); err != nil || !l.Protected() {
		t.Fatalf("a new key, the durable tier down, the marker older than the TTL: %v; want Redis's lock alone", err)
	}
	l.Release(0, nil)

	srv.stop() // SIGKILL: nothing saved since the snapshot
	srv.start()
	l, err = call("k")
	if l != nil || !errors.Is(err, core.ErrStoreUnavailable) {
		t.Fatalf("the completed key after Redis came back from its snapshot, the durable tier down: lease %v, %v; want ErrStoreUnavailable", l != nil, err)
	}
	durable.down.Store(false)
	if _, rec, err := eng.Acquire(&core.Call{Key: "k", TTL: time.Microsecond}); rec == nil || rec.Code != 201 {
		t.Fatalf("the completed key, the durable tier back: %v, %v; want its replay", rec, err)
	}
}

// A server that took another's data as its replica, then was promoted back
// (a switchover to a replica that lagged, and back), keeps its run_id: the
// records written to it alone since the other's promotion are gone, and its
// marker, replicated to the other before, must not count as its own.
func TestIntegrationTieredSwitchBack(t *testing.T) {
	x, y := startRedisServer(t, "--repl-diskless-sync-delay", "0"), startRedisServer(t, "--repl-diskless-sync-delay", "0")
	cx, cy := x.client(t), y.client(t)
	replicaOf := func(c redis.UniversalClient, of *redisServer) {
		t.Helper()
		args := []any{"REPLICAOF", "NO", "ONE"}
		if of != nil {
			args = []any{"REPLICAOF", "127.0.0.1", strconv.Itoa(of.port)}
		}
		if err := c.Do(context.Background(), args...).Err(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); of != nil; time.Sleep(50 * time.Millisecond) {
			s := c.Info(context.Background(), "replication").Val()
			if strings.Contains(s, "master_link_status:up") && strings.Contains(s, "master_sync_in_progress:0") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no sync:\n%s", s)
			}
		}
	}
	durable := &switchable{Store: core.NewMemoryStore(0)}
	store := mustNew(t, cx, nil)
	eng, err := core.New(core.Config{Store: core.NewTiered(store, durable), FailClosed: true, Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	complete := func(key string) {
		t.Helper()
		l, _, err := eng.Acquire(&core.Call{Key: key})
		if l == nil {
			t.Fatal(err)
		}
		l.Complete(&core.Record{Code: 201})
	}
	replicaOf(cy, x)
	complete("first") // writes the marker, which y gets
	before, err := store.RunID(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	replicaOf(cy, nil) // y promoted: it lags from now on
	complete("k")      // on x alone (and in the durable tier)
	replicaOf(cx, y)   // x takes y's data, without k's record
	replicaOf(cx, nil) // and is promoted back
	after, err := store.RunID(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if b, _, _ := strings.Cut(before, " "); !strings.HasPrefix(after, b) {
		t.Fatalf("RunID %q, then %q: want the same run_id", before, after)
	}
	durable.down.Store(true)
	l, _, err := eng.Acquire(&core.Call{Key: "k", TTL: time.Microsecond})
	if l != nil || !errors.Is(err, core.ErrStoreUnavailable) {
		t.Fatalf("the completed key after the switch back, the durable tier down: lease %v, %v; want ErrStoreUnavailable", l != nil, err)
	}
}
