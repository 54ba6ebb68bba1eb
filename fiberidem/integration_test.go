//go:build integration

package fiberidem_test

import (
	"context"
	"crypto/rand"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/redislock"
)

// TestIntegrationHTTPConformance runs the HTTP conformance suite through
// Fiber on the real Redis at IDEM_REDIS_ADDR (default 127.0.0.1:6379). Each
// store has a prefix of its own, and only its keys are deleted afterwards.
func TestIntegrationHTTPConformance(t *testing.T) {
	addr := os.Getenv("IDEM_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 256})
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at IDEM_REDIS_ADDR=%s: %v", addr, err)
	}
	idemtest.TestHTTP(t, serveFiber, func(t *testing.T) core.Store {
		prefix := "fiberidem-test:" + rand.Text()
		t.Cleanup(func() { deleteKeys(t, c, prefix+"*") })
		return redislock.New(c, &redislock.Options{Prefix: prefix})
	})
}

// deleteKeys deletes the keys of one test's prefix, and no others.
func deleteKeys(t *testing.T, c *redis.Client, pattern string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		if err := c.Del(ctx, iter.Val()).Err(); err != nil {
			t.Errorf("cleanup: DEL %s: %v", iter.Val(), err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup: SCAN %s: %v", pattern, err)
	}
}
