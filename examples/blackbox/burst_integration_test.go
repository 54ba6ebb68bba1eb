//go:build integration

package blackbox

import (
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestBurstOnPostgres sends 100 keys, each ten times at once with 400 ms
// handlers, to three freshly started instances of examples/nethttp in the
// transactional mode under fail-open, on PostgreSQL alone and behind the
// tiered store with Redis down (nothing listens on its port). A client
// retries a 409, a 503 and a transport error with the same key, as a
// retrying client does, until it gets a 201; every key must end with one
// order, and every 201 of a key must carry that order. Requests that queued
// for one of the store's connections and then met the deadline used to be
// store errors, run unprotected: 159 orders for 100 keys behind the tiered
// store, 107 on PostgreSQL alone on a loaded machine. The instances' pools
// open their connections first: a request that found room and waits longer
// than StoreTimeout for a new connection is a store error, as for a
// PostgreSQL that does not answer (docs/pgstore.md), and runs unprotected.
func TestBurstOnPostgres(t *testing.T) {
	bin := build(t, "nethttp")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadRedis := "redis://" + l.Addr().String() + "/0"
	l.Close()
	const (
		keys       = 100
		duplicates = 10
	)
	for _, tc := range []struct{ name, redis string }{{"postgres", ""}, {"tiered, Redis down", deadRedis}} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, bin, "DATABASE_URL="+postgresSchema(t), "REDIS_URL="+tc.redis, "IDEM_TX=", "IDEM_FAIL_CLOSED=")
			f.warmPools()
			var (
				mu     sync.Mutex
				ids    = map[string]map[string]bool{} // by key, the order ids of its 201s
				counts = map[int]int{}                // answers by status, retries included
				wg     sync.WaitGroup
			)
			deadline := time.Now().Add(90 * time.Second)
			for k := range keys {
				key := f.newKey("burst-" + strconv.Itoa(k))
				for range duplicates {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(deadline) {
							a := postOrder(f.client, f.servers[rand.IntN(3)].url, 0, "burst", key, 400)
							mu.Lock()
							counts[a.status]++
							if a.status == http.StatusCreated {
								if ids[key] == nil {
									ids[key] = map[string]bool{}
								}
								ids[key][a.id] = true
							}
							mu.Unlock()
							switch a.status {
							case http.StatusCreated:
								return
							case 0, http.StatusConflict, http.StatusServiceUnavailable:
								time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond) // a client's backoff
							default:
								t.Errorf("%s: %d", key, a.status)
								return
							}
						}
						t.Errorf("%s: no 201 before the deadline", key)
					}()
				}
			}
			wg.Wait()
			t.Logf("answers by status: %v", counts)
			orders := f.orders()
			for key, got := range ids {
				if len(orders[key]) != 1 || len(got) != 1 || !got[orders[key][0]] {
					t.Errorf("%s: orders %v, ids of its 201s %v; want one order, in every 201", key, orders[key], got)
				}
			}
			if len(ids) != keys {
				t.Errorf("%d keys got a 201, want %d", len(ids), keys)
			}
		})
	}
}

// warmPools has each instance open the connections of its pool, with as
// many concurrent GET /orders (the orders live in PostgreSQL).
func (f *fleet) warmPools() {
	f.t.Helper()
	var wg sync.WaitGroup
	for _, s := range f.servers {
		for range 16 { // the examples' pool_max_conns
			wg.Go(func() {
				if resp, err := f.client.Get(s.url + "/orders"); err == nil {
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
}
