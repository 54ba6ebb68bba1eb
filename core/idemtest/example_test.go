package idemtest_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

// A store proves itself with one call in its own test file:
// func TestMyStore(t *testing.T) { idemtest.TestStore(t, newStore) }.
// A store whose clock is the process's lets the suite fake time.
func ExampleTestStore() {
	testMyStore := func(t *testing.T) {
		idemtest.TestStore(t, func(*testing.T) core.Store { return core.NewMemoryStore(0) }, idemtest.FakeTime())
	}
	_ = testMyStore
}

// An integration proves itself by serving the suite's handler behind its
// middleware at /orders and /orders/{id}; here, net/http's ServeMux.
func ExampleTestHTTP() {
	serve := func(t *testing.T, eng *core.Engine, app http.Handler) string {
		mux := http.NewServeMux()
		mux.Handle("/orders", eng.Middleware(app))
		mux.Handle("/orders/{id}", eng.Middleware(app))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	testMyAdapter := func(t *testing.T) { idemtest.TestHTTP(t, serve, nil) }
	_ = testMyAdapter
}
