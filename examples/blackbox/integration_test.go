//go:build integration

package blackbox

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestExamplesSeveralInstances starts three instances of each example on
// one real Redis and sends duplicates spread over them: each key creates
// exactly one order, whichever instance each duplicate reaches.
func TestExamplesSeveralInstances(t *testing.T) {
	addr := os.Getenv("IDEM_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	dropOrdersAfter(t, addr)
	// Not parallel: the examples keep their orders in one Redis list, and
	// the test counts what each framework adds to it.
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			bin := build(t, fw)
			var servers []*server
			for range 3 {
				servers = append(servers, start(t, bin, "REDIS_URL=redis://"+addr+"/0"))
			}
			before := servers[0].count()
			const keys, dups = 10, 15
			for range keys {
				results := concurrently(t, servers, dups, newKey(t), `{"item": "lamp", "qty": 1, "delay_ms": 50}`)
				checkDuplicates(t, results)
			}
			for i, s := range servers {
				if got := s.count() - before; got != keys {
					t.Fatalf("instance %d sees %d new orders, want %d (one per key)", i, got, keys)
				}
			}
			// The contract holds on a Redis-backed instance too.
			testContract(t, servers[1])
		})
	}
}

// dropOrdersAfter deletes the HTTP examples' order keys (examples/internal/orders)
// from the Redis at addr when t ends, unless they were there before it (an
// example running on that Redis): they have no TTL and would outlive the
// test for ever.
func dropOrdersAfter(t *testing.T, addr string) {
	keys := []string{"idem-example:orders", "idem-example:order-seq"}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	before, err := rdb.Exists(ctx, keys...).Result()
	if err != nil {
		rdb.Close()
		t.Fatalf("Redis at %s: %v", addr, err)
	}
	t.Cleanup(func() {
		defer rdb.Close()
		if before == 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("DEL %v: %v", keys, err)
			}
		}
	})
}
