package idemclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemkey"
)

// keyRecorder is a downstream service that records the key of every request.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.keys = append(k.keys, r.Method+" "+r.URL.Path+" "+r.Header.Get(DefaultKeyHeader))
	k.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

func (k *keyRecorder) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := k.keys
	k.keys = nil
	return keys
}

// A handler running under a key sends derived keys downstream: the same on
// every run of the handler, one per method and path; without a key, a fresh
// UUIDv4 per request.
func TestDerivedKeyDownstream(t *testing.T) {
	t.Parallel()
	rec := &keyRecorder{}
	down := httptest.NewServer(rec)
	t.Cleanup(down.Close)
	client := &http.Client{Transport: &Transport{}}
	send := func(ctx context.Context, method, path string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, down.URL+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	eng, err := core.New(core.Config{Scope: func(r *core.Request) string { return r.Header.Get("X-User-ID") }})
	if err != nil {
		t.Fatal(err)
	}
	var want []string // what the handler's run sent, computed with core.DerivedKey
	up := httptest.NewServer(eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		send(r.Context(), http.MethodPost, "/charges")
		send(r.Context(), http.MethodPost, "/emails")
		send(r.Context(), http.MethodDelete, "/charges")
		host := strings.TrimPrefix(down.URL, "http://")
		want = want[:0]
		for _, l := range []string{"POST /charges", "POST /emails", "DELETE /charges"} {
			method, path, _ := strings.Cut(l, " ")
			k, ok := core.DerivedKey(r.Context(), method+" "+host+path)
			if !ok {
				t.Error("DerivedKey: no key in the handler's context")
			}
			want = append(want, l+" "+k)
		}
		w.WriteHeader(http.StatusInternalServerError) // not stored: a retry runs the handler again
	})))
	t.Cleanup(up.Close)
	call := func(key, user string) []string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, up.URL, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-User-ID", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := rec.take()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("downstream keys\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return got
	}
	first := call("k1", "alice")
	again := call("k1", "alice")
	if strings.Join(first, "\n") != strings.Join(again, "\n") {
		t.Fatalf("a run again sent other keys:\n%v\n%v", first, again)
	}
	seen := map[string]bool{}
	for _, keys := range [][]string{first, call("k2", "alice"), call("k1", "bob")} {
		for _, l := range keys {
			k := l[strings.LastIndexByte(l, ' ')+1:]
			if seen[k] {
				t.Fatalf("key %s sent for two labels, keys or scopes", k)
			}
			seen[k] = true
			if _, err := uuid.Parse(k); err != nil || idemkey.Token(k) != nil {
				t.Fatalf("derived key %q: not a valid key (%v)", k, err)
			}
		}
	}

	// Outside a keyed handler: a fresh UUIDv4 each time.
	send(context.Background(), http.MethodPost, "/charges")
	send(context.Background(), http.MethodPost, "/charges")
	got := rec.take()
	a, b := got[0][len("POST /charges "):], got[1][len("POST /charges "):]
	for _, k := range []string{a, b} {
		if idemkey.UUIDv4(k) != nil {
			t.Fatalf("key without a running key %q, want a UUIDv4", k)
		}
	}
	if a == b {
		t.Fatalf("two requests without a running key shared %q", a)
	}
}
