package redislock_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

// The benchmarks need a real Redis (miniredis says nothing about timing):
// the one at IDEM_REDIS_ADDR (default 127.0.0.1:6379), under a key prefix
// of their own that they delete afterwards. Without one they skip.
//
// Each runs with the store batching its scripts (the default), without
// (Options.DisableBatching), and on go-redis's AutoPipeliner (its default
// options; the store does not batch on it), serially (one request at a
// time: latency) and in parallel (GOMAXPROCS×4 goroutines: throughput).
// RawGET is the baseline: one GET round trip of go-redis, over the client
// (the AutoPipeliner's own for that variant).
// Bare is the handler without the middleware, NoKey the handler behind it
// without a key, First a fresh key per request (two round trips), Replay
// one key (one round trip).

// benchClient is the client the package docs recommend, from NewClient.
func benchClient(b *testing.B) (redis.UniversalClient, string) {
	b.Helper()
	addr := os.Getenv("IDEM_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c, err := redislock.NewClient("redis://" + addr + "/0?pool_size=64")
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		b.Skipf("no Redis at IDEM_REDIS_ADDR=%s: %v", addr, err)
	}
	prefix := "idembench:" + rand.Text()
	b.Cleanup(func() {
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 1000 {
				c.Unlink(ctx, keys...)
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			c.Unlink(ctx, keys...)
		}
	})
	return c, prefix
}

var benchBody = []byte(`{"id":"ord_1","item":"book","qty":2}`)

func benchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(benchBody)
	})
}

func BenchmarkRedis(b *testing.B) {
	for _, name := range []string{"batched", "unbatched", "autopipeline"} {
		b.Run(name, func(b *testing.B) {
			client, prefix := benchClient(b)
			var c redis.Cmdable = client
			if name == "autopipeline" {
				ap, err := client.AutoPipeline()
				if err != nil {
					b.Fatal(err)
				}
				c = ap
			}
			eng, err := core.New(core.Config{
				Store:       mustNew(b, c, &redislock.Options{Prefix: prefix, DisableBatching: name == "unbatched"}),
				ResponseTTL: time.Minute,
			})
			if err != nil {
				b.Fatal(err)
			}
			protected := eng.Middleware(benchHandler())
			bare := benchHandler()
			ctx := context.Background()
			client.Set(ctx, prefix+":get", benchBody, time.Minute)
			var fresh atomic.Int64
			run := prefix // keys of this run
			// An op reports failures with b.Error, which RunParallel's
			// goroutines may call (b.Fatal they may not).
			cases := []struct {
				name string
				op   func(b *testing.B)
			}{
				{"bare", func(b *testing.B) { serve(b, bare, "") }},
				{"raw-get", func(b *testing.B) {
					if err := c.Get(ctx, prefix+":get").Err(); err != nil {
						b.Error(err)
					}
				}},
				{"no-key", func(b *testing.B) { serve(b, protected, "") }},
				{"first-run", func(b *testing.B) { serve(b, protected, run+"-"+strconv.FormatInt(fresh.Add(1), 10)) }},
				{"replay", func(b *testing.B) { serve(b, protected, run+"-replay") }},
			}
			b.Run("serial", func(b *testing.B) {
				for _, tc := range cases {
					b.Run(tc.name, func(b *testing.B) {
						b.ReportAllocs()
						for range b.N {
							tc.op(b)
						}
					})
				}
			})
			b.Run("parallel", func(b *testing.B) {
				for _, tc := range cases {
					b.Run(tc.name, func(b *testing.B) {
						b.ReportAllocs()
						b.SetParallelism(4)
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								tc.op(b)
							}
						})
					})
				}
			})
		})
	}
}

// serve runs one POST through h; a key of "" sends none.
func serve(b *testing.B, h http.Handler, key string) {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book","qty":2}`))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		b.Errorf("status %d: %s", w.Code, w.Body)
	}
}
