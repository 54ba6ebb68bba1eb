package swagger

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/idem-go/idem/core"
)

// The documented key header has a pattern, and a header value of these
// keys matches it exactly when the Engine does not refuse it for its bytes:
// a client validating against the spec sends no key that the server
// answers with 400 for a byte it refuses, and drops none that the server
// accepts. (The pattern is about bytes only: a comma-separated list or an
// unterminated quote passes it, and gets the server's 400.)
func TestKeyPatternMatchesEngine(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"swagger": "2.0", "info": {"title": "t", "version": "1"},
		"paths": {"/orders": {"post": {"responses": {"201": {"description": "Created"}}}}}}`)
	out, err := Inject(doc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, Pattern string }
		}
	}
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	params := d.Paths["/orders"]["post"].Parameters
	if len(params) != 1 || params[0].Pattern == "" {
		t.Fatalf("key parameter %+v: want one, with a pattern", params)
	}
	pattern := regexp.MustCompile(params[0].Pattern)

	eng, err := core.New(core.Config{Store: core.NewMemoryStore(0)})
	if err != nil {
		t.Fatal(err)
	}
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for _, key := range []string{
		"abc", "0b5f6a1e-4c7d-4f7e-9a43-2f3c1d5e6f70", "a b", "~!@#$%^&*()[]{}<>?/|", `"quoted"`, `"q";p=1`,
		"café", "a\x7fb", "a\x01b", "\xff", "日本",
	} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if accepted := rec.Code != http.StatusBadRequest; accepted != pattern.MatchString(key) {
			t.Errorf("key %q: the server answers %d, the pattern %s matches: %v", key, rec.Code, pattern, pattern.MatchString(key))
		}
	}
}
