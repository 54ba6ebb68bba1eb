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
	if err := redis.NewClient(&redis.Options{Addr: addr}).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", addr, err)
	}
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
