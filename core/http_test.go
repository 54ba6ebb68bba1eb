package core_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

// serveMux is the net/http harness of the conformance suite: a Go 1.22+
// ServeMux, whose patterns give the route template to the middleware
// inside it.
func serveMux(t *testing.T, eng *core.Engine, app http.Handler) string {
	mux := http.NewServeMux()
	mux.Handle("/orders", eng.Middleware(app))
	mux.Handle("/orders/{id}", eng.Middleware(app))
	srv := httptest.NewUnstartedServer(recoverer(mux))
	srv.Config.ErrorLog = nil
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// recoverer turns a panic into a 500, as an application's recovery
// middleware would, and sets the suite's outer header.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(idemtest.OuterHeader, r.Header.Get(idemtest.OuterHeader))
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func TestHTTPConformance(t *testing.T) {
	idemtest.TestHTTP(t, serveMux, nil)
}
