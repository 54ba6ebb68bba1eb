package redislock_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

func Example() {
	// REDIS_URL names the Redis: redis://127.0.0.1:6379/0, rediss://…,
	// unix:///run/redis.sock, redis+cluster://host:7000?addr=host2:7000,
	// redis+sentinel://host:26379?master_name=mymaster. This example falls
	// back to an in-process miniredis so that it runs anywhere.
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		mr, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer mr.Close()
		redisURL = "redis://" + mr.Addr()
	}
	client, err := redislock.NewClient(redisURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	store, err := redislock.New(client, nil)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	orders := 0
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, orders)
	})))

	key := rand.Text() // a client's Idempotency-Key; the same on every retry
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Body, "replay:", w.Header().Get("X-Idempotency-Replay") == "true")
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 {"id":1} replay: false
	// 201 {"id":1} replay: true
	// orders created: 1
}

func ExampleStore_Keys() {
	client, err := redislock.NewClient("redis://127.0.0.1:6379/0") // connects lazily
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redislock.New(client, &redislock.Options{Prefix: "shop:idem"})
	if err != nil {
		log.Fatal(err)
	}
	response, lock, err := store.Keys("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(response)
	fmt.Println(lock)
	// Output:
	// shop:idem:{9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
	// shop:idem-lock:{9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
}

// An operator forgets a completed key so that a corrected request runs
// again; a key in flight is refused. (The idemctl command does this.)
func ExampleStore_Purge() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client, err := redislock.NewClient("redis://" + mr.Addr())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redislock.New(client, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	done, running := core.ID("alice", "order-1", ""), core.ID("alice", "order-2", "")
	_, token, _ := store.Acquire(ctx, done, time.Minute)
	store.Complete(ctx, done, token, []byte("record"), time.Hour)
	store.Acquire(ctx, running, time.Minute)

	fmt.Println(store.Purge(ctx, done))
	fmt.Println(store.Purge(ctx, running))
	locks, _ := store.InFlight(ctx, 10)
	fmt.Println(len(locks), locks[0].Key == running)
	// Output:
	// <nil>
	// idem: key in flight
	// 1 true
}
