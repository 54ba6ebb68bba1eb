// Command testserver is an API instance for redislock's multi-process
// integration test: POST /orders behind core.Engine.Middleware on the Redis
// store, whose handler INCRs a counter in Redis (its side effect) and
// answers with the new count. Several of them share one Redis.
//
//	testserver -redis redis://127.0.0.1:6379/0 -prefix test:abc -counter test:abc:count
//
// With -unbatched, the store sends each script alone (Options.DisableBatching).
//
// It prints "listening on <addr>" once it accepts connections, and stops on
// SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	redisURL := flag.String("redis", os.Getenv("REDIS_URL"), "Redis URL (default $REDIS_URL)")
	prefix := flag.String("prefix", redislock.DefaultPrefix, "key prefix of the store")
	counter := flag.String("counter", "testserver:count", "Redis key the handler INCRs")
	delay := flag.Duration("delay", 20*time.Millisecond, "handler duration, so that duplicates overlap")
	name := flag.String("name", "", "instance name, in every response")
	unbatched := flag.Bool("unbatched", false, "send each script alone (redislock.Options.DisableBatching)")
	flag.Parse()

	client, err := redislock.NewClient(*redisURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redislock.New(client, &redislock.Options{Prefix: *prefix, DisableBatching: *unbatched})
	if err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{
		Store:      store,
		FailClosed: true, // a store error must not run the handler unprotected here
		Observer: func(ev core.Event) {
			if ev.Outcome == core.OutcomeStoreError || ev.Outcome == core.OutcomeLockLost {
				log.Printf("%s: %v", ev.Outcome, ev.Err)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := client.Incr(r.Context(), *counter).Result()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		time.Sleep(*delay)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"n":%d,"server":%q,"at":%d}`, r.Header.Get("Idempotency-Key"), n, *name, time.Now().UnixNano())
	})))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	fmt.Println("listening on", ln.Addr())
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-stopped
}
