package echoidem

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

// TestRouterAnswers fails if an Echo release stops setting
// echo.NotFoundHandler and echo.MethodNotAllowedHandler on the contexts of
// requests that no route matches, which routerAnswer compares by
// reflection, lacking a public way: the middleware would then lock keys
// sent to wrong URLs (and still not store their 404s).
func TestRouterAnswers(t *testing.T) {
	e := echo.New()
	e.POST("/orders/:id", func(echo.Context) error { return nil })
	for _, tc := range []struct {
		method, path string
		answer       bool
	}{
		{http.MethodPost, "/orders/1", false},
		{http.MethodPost, "/nowhere", true}, // 404
		{http.MethodPut, "/orders/1", true}, // 405
		{http.MethodPost, "/orders/", true}, // an empty parameter: 404 too
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		c := e.NewContext(req, httptest.NewRecorder())
		e.Router().Find(tc.method, tc.path, c)
		if got := routerAnswer(c); got != tc.answer {
			t.Errorf("%s %s: routerAnswer = %v, want %v: has Echo changed the handlers its router sets for a URL no route matches?",
				tc.method, tc.path, got, tc.answer)
		}
	}
}
