package idemtest

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/seal"
)

// Sealed stores a response through an Engine on store with a Sealer (a
// static key), checks that it replays, and returns what the store must not
// hold in clear: the body, a header's name and value, the client's key and
// the scope. The caller reads the store's raw bytes and asserts none of
// them is there.
func Sealed(t *testing.T, store core.Store) (plaintexts []string) {
	t.Helper()
	keys, err := seal.ParseKeys("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, seal.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	eng := newEngine(t, core.Config{Store: store, Sealer: seal.New(keys),
		Scope: func(r *core.Request) string { return r.Header.Get("X-User-ID") }})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/secret-location-42")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"item":"secret-item-book"}`) //nolint:errcheck // a recorder
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
	return []string{"secret-item-book", "secret-location-42", "Location", "secret-key-1", "secret-user"}
}
