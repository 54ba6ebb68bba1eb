//go:build integration

package pgstore_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
	"github.com/idem-go/idem/seal"
)

// The raw rows of a sealed record hold no body, header value, key or scope
// in clear (nor its status code), and the response replays.
func TestIntegrationSealedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	keys, err := seal.ParseKeys("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, seal.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: store, Sealer: seal.New(keys), Scope: func(r *core.Request) string { return r.Header.Get("X-User-ID") }})
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
	var (
		record []byte
		code   *int32
		n      int
	)
	err = pool.QueryRow(ctx, "SELECT record, status_code, count(*) OVER () FROM "+pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()).
		Scan(&record, &code, &n)
	if err != nil || n != 1 || code != nil || len(record) == 0 {
		t.Fatalf("rows %d, status_code %v, record of %d bytes, %v; want one row, no code", n, code, len(record), err)
	}
	for _, clear := range []string{"secret-item-book", "secret-location-42", "Location", "secret-key-1", "secret-user"} {
		if bytes.Contains(record, []byte(clear)) {
			t.Errorf("the stored record holds %q in clear", clear)
		}
	}
}
