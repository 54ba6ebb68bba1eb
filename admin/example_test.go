package admin_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
)

// An application mounts the handler on its own mux, behind a bearer token of
// its configuration; the Engine's store is the one operators act on.
func ExampleHandler() {
	store := core.NewMemoryStore(0)
	eng, err := core.New(core.Config{Store: store, Scope: func(r *core.Request) string { return r.Header.Get("X-User-ID") }})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	mux.Handle("/admin/idempotency/", admin.Handler(store, admin.BearerToken("s3cret"))) // os.Getenv("IDEM_ADMIN_TOKEN")

	order := httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`))
	order.Header.Set("X-User-ID", "alice")
	order.Header.Set("Idempotency-Key", "order-1")
	mux.ServeHTTP(httptest.NewRecorder(), order)

	for _, token := range []string{"wrong", "s3cret"} {
		r := httptest.NewRequest("POST", "/admin/idempotency/purge?scope=alice&key=order-1", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code, strings.TrimSpace(w.Body.String()) != "")
	}
	// Output:
	// 401 true
	// 200 true
}

// Stored headers and bodies (body=1) need a second permission: here an
// auditor's token beside the operators'.
func ExampleWithBodyAuthorizer() {
	store := core.NewMemoryStore(0)
	h := admin.Handler(store, admin.BearerToken("s3cret"), admin.WithBodyAuthorizer(func(r *http.Request) bool {
		return r.Header.Get("X-Auditor-Token") == "audit" // an application's own check
	}))
	for _, auditor := range []string{"", "audit"} {
		r := httptest.NewRequest("GET", "/admin/idempotency/inspect?scope=alice&key=order-1&body=1", nil)
		r.Header.Set("Authorization", "Bearer s3cret")
		r.Header.Set("X-Auditor-Token", auditor)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code) // 404 once allowed: nothing stored under that key
	}
	// Output:
	// 403
	// 404
}

// Inspect finds a key by the request's scope and Idempotency-Key, as the
// Engine stored it.
func ExampleInspect() {
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	l, _, err := eng.Acquire(&core.Call{Scope: "alice", Key: "order-1", Method: "POST", Route: "/orders"})
	if err != nil {
		log.Fatal(err)
	}
	l.Complete(&core.Record{Code: 201, Body: []byte(`{"id":1}`)})

	id, err := admin.Target{Scope: "alice", Key: "order-1"}.StoreKey()
	if err != nil {
		log.Fatal(err)
	}
	k, err := admin.Inspect(ctx, store, id, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(k.Status, k.Scope, k.Key, k.Code, k.Size)
	// Output: completed alice order-1 201 8
}

// OldestInFlight is the gauge of keys stuck in processing, read on each
// scrape.
func ExampleOldestInFlight() {
	store := core.NewMemoryStore(0)
	age, err := admin.OldestInFlight(context.Background(), store)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	fmt.Println(age)
	// Output: 0s
}
