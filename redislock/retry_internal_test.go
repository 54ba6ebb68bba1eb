package redislock

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// go-redis retries a command whose reply was lost (a read timeout, EOF):
// the script then runs twice with the same arguments. A retried acquire must
// still own the lock it took, and a retried complete must report success,
// not a lost lock.
func TestScriptsIdempotentUnderRetry(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	ctx := context.Background()
	s, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, lock, err := s.Keys("0123abcd")
	if err != nil {
		t.Fatal(err)
	}
	for try := range 2 {
		n, err := acquireScript.Run(ctx, c, []string{resp, lock}, "tok", 60000).Int64()
		if err != nil || n != 1 {
			t.Fatalf("acquire, try %d: %d, %v; want 1 (the lock is ours)", try, n, err)
		}
	}
	if n, _ := acquireScript.Run(ctx, c, []string{resp, lock}, "other", 60000).Int64(); n != 0 {
		t.Fatalf("acquire by another token: %d, want 0 (in flight)", n)
	}
	for try := range 2 {
		n, err := completeScript.Run(ctx, c, []string{resp, lock, s.stepPrefix + "0123abcd}"}, "tok", "record", 60000).Int64()
		if err != nil || n != 1 {
			t.Fatalf("complete, try %d: %d, %v; want 1", try, n, err)
		}
	}
	if n, _ := completeScript.Run(ctx, c, []string{resp, lock, s.stepPrefix + "0123abcd}"}, "tok", "another record", 60000).Int64(); n != 0 {
		t.Fatalf("complete of another record with a spent token: %d, want 0", n)
	}
	if got, _ := c.Get(ctx, resp).Result(); got != "record" {
		t.Fatalf("record %q", got)
	}
}
