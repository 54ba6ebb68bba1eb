package redislock_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/redislock"
)

// testSealedAtRest stores a response through an Engine with a Sealer on a
// Store of c under prefix, then reads every key of the prefix raw: none
// holds the body, a header value, the client's key or the scope in clear,
// and the response replays.
func testSealedAtRest(t *testing.T, c redis.UniversalClient, prefix string) {
	t.Helper()
	plaintexts := idemtest.Sealed(t, mustNew(t, c, &redislock.Options{Prefix: prefix}))
	ctx := context.Background()
	found := 0
	iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		raw, err := c.Get(ctx, iter.Val()).Bytes()
		if err != nil {
			continue // not a string: the scope's quota sets, if any
		}
		found++
		for _, clear := range plaintexts {
			if bytes.Contains(raw, []byte(clear)) {
				t.Errorf("Redis key %s holds %q in clear", iter.Val(), clear)
			}
		}
	}
	if err := iter.Err(); err != nil || found == 0 {
		t.Fatalf("scan: %d string keys, %v", found, err)
	}
}

func TestSealedAtRest(t *testing.T) {
	_, c := newMiniredis(t)
	testSealedAtRest(t, c, "sealed")
}
