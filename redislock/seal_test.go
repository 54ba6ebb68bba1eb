package redislock_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
	"github.com/idem-go/idem/seal"
)

// testSealedAtRest stores a response through an Engine with a Sealer on a
// Store of c under prefix, then reads every key of the prefix raw: none
// holds the body, a header value, the client's key or the scope in clear,
// and the response replays.
func testSealedAtRest(t *testing.T, c redis.UniversalClient, prefix string) {
	t.Helper()
	keys, err := seal.ParseKeys("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, seal.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: mustNew(t, c, &redislock.Options{Prefix: prefix}), Sealer: seal.New(keys),
		Scope: func(r *core.Request) string { return r.Header.Get("X-User-ID") }})
	if err != nil {
		t.Fatal(err)
	}
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/secret-location-42")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"item":"secret-item-book"}`)
	}))
	var last *httptest.ResponseRecorder
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"secret-item-book"}`))
		r.Header.Set("Idempotency-Key", "secret-key-1")
		r.Header.Set("X-User-ID", "secret-user")
		last = httptest.NewRecorder()
		h.ServeHTTP(last, r)
	}
	if last.Header().Get(core.HeaderReplay) != "true" || last.Body.String() != `{"item":"secret-item-book"}` {
		t.Fatalf("replay: %d %v %q", last.Code, last.Header(), last.Body)
	}
	ctx := context.Background()
	found := 0
	iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		raw, err := c.Get(ctx, iter.Val()).Bytes()
		if err != nil {
			continue // not a string: the scope's quota sets, if any
		}
		found++
		for _, clear := range []string{"secret-item-book", "secret-location-42", "Location", "secret-key-1", "secret-user"} {
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
