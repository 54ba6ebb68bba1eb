// Package redistest gives tests a real Redis for the Redis store: the one at
// $IDEM_REDIS_ADDR (default 127.0.0.1:6379), shared by many tests at once.
// Every test gets a key prefix of its own, and its cleanup deletes the keys
// under that prefix and only those: never FLUSHDB on a shared Redis.
//
// An adapter's integration test runs the HTTP conformance suite on it in
// one line:
//
//	idemtest.TestHTTP(t, serve, redistest.NewStore)
package redistest

import (
	"context"
	"crypto/rand"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

// Addr returns the address of the test Redis: $IDEM_REDIS_ADDR, or
// 127.0.0.1:6379.
func Addr() string {
	if a := os.Getenv("IDEM_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Client returns a client of the test Redis and a key prefix of the test's
// own. t.Cleanup deletes the keys under the prefix and closes the client.
// The test fails at once if Redis does not answer.
func Client(t testing.TB) (*redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(), PoolSize: 64})
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		t.Fatalf("Redis at IDEM_REDIS_ADDR=%s: %v", Addr(), err)
	}
	prefix := "idemtest:" + rand.Text()
	t.Cleanup(func() {
		defer c.Close()
		DeleteKeys(t, c, prefix+"*")
	})
	return c, prefix
}

// NewStore returns a redislock.Store on the test Redis under a prefix of
// the test's own: the newStore of idemtest.TestStore and idemtest.TestHTTP.
func NewStore(t *testing.T) core.Store {
	c, prefix := Client(t)
	s, err := redislock.New(c, &redislock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// DeleteKeys deletes the keys matching pattern, one by one (the keys of a
// Cluster live in many slots), reporting failures to t.
func DeleteKeys(t testing.TB, c redis.UniversalClient, pattern string) {
	ctx := context.Background()
	var keys []string
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup: SCAN %s: %v", pattern, err)
	}
	for _, k := range keys {
		if err := c.Del(ctx, k).Err(); err != nil {
			t.Errorf("cleanup: DEL %s: %v", k, err)
		}
	}
}
