package exampleapp

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idem-go/idem/core"
)

// TestCORSHandler: a preflight of the origin is answered without reaching
// the handler; a request of the origin reaches it with the CORS headers; a
// request of another origin reaches it without; no origin, no wrapper.
func TestCORSHandler(t *testing.T) {
	const origin = "http://127.0.0.1:8099"
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ran int
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++; w.WriteHeader(http.StatusCreated) })
	h := corsFor(origin, eng.Config()).Handler(next)
	send := func(method, from string, preflight bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/orders", nil)
		if from != "" {
			r.Header.Set("Origin", from)
		}
		if preflight {
			r.Header.Set("Access-Control-Request-Method", http.MethodPost)
			r.Header.Set("Access-Control-Request-Headers", "content-type,idempotency-key,x-user-id")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	w := send(http.MethodOptions, origin, true)
	want := map[string]string{
		"Access-Control-Allow-Origin":  origin,
		"Access-Control-Allow-Methods": "GET, POST, PUT, PATCH, DELETE",
		"Access-Control-Allow-Headers": "Content-Type, X-User-ID, Idempotency-Key, X-Idempotency-Key",
		"Access-Control-Max-Age":       "600",
	}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("preflight %s: %q, want %q", k, got, v)
		}
	}
	if w.Code != http.StatusNoContent || ran != 0 {
		t.Errorf("preflight: %d, handler ran %d times; want 204, 0", w.Code, ran)
	}

	w = send(http.MethodPost, origin, false)
	if w.Code != http.StatusCreated || ran != 1 || w.Header().Get("Access-Control-Allow-Origin") != origin ||
		w.Header().Get("Access-Control-Expose-Headers") != "X-Idempotency-Replay, Retry-After, X-Idempotency-Body-Omitted, X-Original-Timestamp, Location" {
		t.Errorf("POST of the origin: %d, ran %d, headers %v", w.Code, ran, w.Header())
	}
	for _, from := range []string{"http://127.0.0.1:8100", ""} {
		w = send(http.MethodPost, from, false)
		if w.Code != http.StatusCreated || w.Header().Get("Access-Control-Allow-Origin") != "" || w.Header().Get("Access-Control-Expose-Headers") != "" {
			t.Errorf("POST of origin %q: %d, headers %v; want 201 without CORS headers", from, w.Code, w.Header())
		}
	}
	w = send(http.MethodOptions, "http://127.0.0.1:8100", true)
	if w.Header().Get("Access-Control-Allow-Origin") != "" || w.Header().Get("Access-Control-Allow-Headers") != "" {
		t.Errorf("preflight of another origin: headers %v; want no CORS headers", w.Header())
	}
	h, ran = CORS{}.Handler(next), 0 // CORS_ORIGIN unset
	w = send(http.MethodOptions, origin, true)
	if ran != 1 || w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("without an origin, a preflight: handler ran %d times, headers %v; want 1, no CORS headers", ran, w.Header())
	}
}
