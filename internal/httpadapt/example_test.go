package httpadapt_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/httpadapt"
)

// noStore is a framework's per-request store with nothing in it.
type noStore struct{}

func (noStore) Get(string) any { return nil }

// An adapter over net/http in a few lines: Begin, then write the Engine's
// response or run the handler on the Flight's ResponseWriter and Finish.
func ExampleProtected() {
	eng, err := core.New(core.Config{})
	if err != nil {
		panic(err)
	}
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "created from %s", body)
	}
	serve := func(w http.ResponseWriter, r *http.Request) {
		var p httpadapt.Protected
		f, resp := p.Begin(eng, r, "/orders", "", noStore{}, w)
		switch {
		case resp != nil:
			resp.Write(w)
			return
		case f == nil:
			handler(w, r)
			return
		}
		defer f.Abort() // a panic: the lock is released, nothing stored
		handler(f.ResponseWriter(w), f.Request(r))
		f.Finish(nil) // a failed commit's 503 as problem+json
	}
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("book"))
		r.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		serve(w, r)
		fmt.Printf("%d %s replay=%q\n", w.Code, w.Body, w.Header().Get(core.HeaderReplay))
	}
	// Output:
	// 201 created from book replay=""
	// 201 created from book replay="true"
}
