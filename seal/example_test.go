package seal_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/seal"
)

// Records are sealed under the first key of IDEM_SEAL_KEYS; the store sees
// no byte of the response in clear, and the replay is the response.
func Example() {
	// In production: os.Getenv("IDEM_SEAL_KEYS"), with keys of
	// `openssl rand -base64 32`.
	spec := "2025-06:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, seal.KeySize))
	keys, err := seal.ParseKeys(spec)
	if err != nil {
		panic(err)
	}
	store := core.NewMemoryStore(0)
	eng, err := core.New(core.Config{Store: store, Sealer: seal.New(keys)})
	if err != nil {
		panic(err)
	}
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/42")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":42,"card":"4242"}`)
	}))
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "k-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Location"), w.Header().Get(core.HeaderReplay), w.Body.String())
	}
	st, _ := store.Inspect(context.Background(), core.ID("", "k-1", ""))
	rec, _ := core.DecodeRecord(st.Record)
	fmt.Println("sealed by", rec.SealedBy, "| in clear:", bytes.Contains(st.Record, []byte("4242")))
	// Output:
	// 201 /orders/42  {"id":42,"card":"4242"}
	// 201 /orders/42 true {"id":42,"card":"4242"}
	// sealed by 2025-06 | in clear: false
}
