package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

// An operator purges a key that an order completed, so that a corrected
// request runs again; it is then gone (exit 1: not found).
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	store, err := redislock.New(client, nil)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	l, _, err := eng.Acquire(&core.Call{Scope: "alice", Key: "order-1", Fingerprint: sha256.Sum256([]byte("{}"))})
	if err != nil {
		log.Fatal(err)
	}
	l.Complete(&core.Record{Code: 201})

	ctx, url := context.Background(), "redis://"+m.Addr()
	code := run(ctx, []string{"-redis", url, "purge", "-scope", "alice", "-key", "order-1"}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	code = run(ctx, []string{"-redis", url, "inspect", "-scope", "alice", "-key", "order-1"}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	// Output:
	// purged 7db279a315cb4f8e8cb09c57bb37149634aee8b496a4bd89bbb0723f558d17ed
	// exit 0
	// idemctl: not found: 7db279a315cb4f8e8cb09c57bb37149634aee8b496a4bd89bbb0723f558d17ed
	// exit 1
}
