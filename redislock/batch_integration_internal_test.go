//go:build integration

package redislock

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestIntegrationBatching runs the batcher's tests on a redis-server of its
// own (its noscript case runs SCRIPT FLUSH, which the shared Redis of the
// other tests must not see).
func TestIntegrationBatching(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	srv := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })

	var n int
	testBatching(t, func(t *testing.T) (*redis.Client, string) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
			if time.Now().After(deadline) {
				t.Fatalf("redis-server on %s did not start", addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		n++
		return c, "batchtest" + strconv.Itoa(n)
	})
}
