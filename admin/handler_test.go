package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
)

const prefix = "/admin/idempotency/"

// serve sends one request to h and returns the response.
func serve(h http.Handler, method, target string, header http.Header, form url.Values) *httptest.ResponseRecorder {
	var r *http.Request
	if form != nil {
		r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	for name, v := range header {
		r.Header[name] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var bearer = http.Header{"Authorization": {"Bearer s3cret"}}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	return v
}

// TestHandlerWithoutAuthorizer: a handler given no authorizer refuses
// every request, and the store is left as it was.
func TestHandlerWithoutAuthorizer(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(0)
	eng := newEngine(t, store)
	complete(t, eng, "alice", "k1", &core.Record{Code: 201})
	l := lock(t, eng, "alice", "k2")
	defer l.Release(0, nil)
	h := admin.Handler(store, nil)
	for _, req := range []struct{ method, path string }{
		{"GET", "inspect?scope=alice&key=k1"},
		{"POST", "purge?scope=alice&key=k1"},
		{"POST", "unlock?scope=alice&key=k2"},
		{"GET", "inflight"},
		{"GET", "nothing"},
	} {
		w := serve(h, req.method, prefix+req.path, bearer, nil)
		if w.Code != http.StatusForbidden || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s without an authorizer: %d %s", req.method, req.path, w.Code, w.Header().Get("Content-Type"))
		}
	}
	if store.Len() != 2 {
		t.Fatalf("store holds %d keys after refused requests, want 2", store.Len())
	}
	if _, err := store.Inspect(context.Background(), core.ID("alice", "k1", "")); err != nil {
		t.Fatalf("record after a refused purge: %v", err)
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(0)
	complete(t, newEngine(t, store), "alice", "k1", &core.Record{Code: 201})
	tests := []struct {
		token, auth string
		want        int
	}{
		{"s3cret", "Bearer s3cret", http.StatusOK},
		{"s3cret", "bearer s3cret", http.StatusOK},
		{"s3cret", "", http.StatusUnauthorized},
		{"s3cret", "Bearer s3cre", http.StatusUnauthorized},
		{"s3cret", "Bearer s3cret2", http.StatusUnauthorized},
		{"s3cret", "Basic s3cret", http.StatusUnauthorized},
		{"s3cret", "s3cret", http.StatusUnauthorized},
		{"", "Bearer ", http.StatusUnauthorized},
		{"", "", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		h := admin.Handler(store, admin.BearerToken(tt.token))
		header := http.Header{}
		if tt.auth != "" {
			header.Set("Authorization", tt.auth)
		}
		w := serve(h, "GET", prefix+"inspect?scope=alice&key=k1", header, nil)
		if w.Code != tt.want {
			t.Errorf("token %q, Authorization %q: %d, want %d", tt.token, tt.auth, w.Code, tt.want)
		}
		if w.Code == http.StatusUnauthorized && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without WWW-Authenticate: Bearer: %q", w.Header().Get("WWW-Authenticate"))
		}
	}
}

func TestHandlerOperations(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(0)
	eng := newEngine(t, store)
	complete(t, eng, "alice", "done", &core.Record{Code: 201, Body: []byte(`{"id":1}`)})
	running := lock(t, eng, "alice", "running")
	defer running.Release(0, nil)
	stuck := lock(t, eng, "bob", "stuck")
	defer stuck.Release(0, nil)

	h := admin.Handler(store, admin.BearerToken("s3cret"))
	mux := http.NewServeMux()
	mux.Handle(prefix, h)
	get := func(path string) *httptest.ResponseRecorder { return serve(mux, "GET", prefix+path, bearer, nil) }
	post := func(path string, form url.Values) *httptest.ResponseRecorder {
		return serve(mux, "POST", prefix+path, bearer, form)
	}

	// inspect
	w := get("inspect?scope=alice&key=done")
	k := decode[admin.Key](t, w)
	if w.Code != 200 || k.ID != core.ID("alice", "done", "") || k.Status != "completed" || k.Code != 201 || k.Size != 8 || k.Body != "" {
		t.Fatalf("inspect: %d %s", w.Code, w.Body)
	}
	if k := decode[admin.Key](t, get("inspect?scope=alice&key=done&body=1")); k.Body != `{"id":1}` {
		t.Fatalf("inspect with body=1: %+v", k)
	}
	if k := decode[admin.Key](t, get("inspect?id="+core.ID("alice", "running", ""))); k.Status != "in_flight" || k.LockedAt.IsZero() {
		t.Fatalf("inspect by id of a running request: %+v", k)
	}

	// inflight
	w = get("inflight")
	list := decode[admin.KeyList](t, w)
	if w.Code != 200 || len(list.Keys) != 2 || list.Keys[0].ID != core.ID("alice", "running", "") || list.Keys[1].ID != core.ID("bob", "stuck", "") {
		t.Fatalf("inflight: %d %s", w.Code, w.Body)
	}
	if list := decode[admin.KeyList](t, get("inflight?limit=1")); len(list.Keys) != 1 {
		t.Fatalf("inflight?limit=1: %+v", list)
	}

	// purge: refused while the request runs; a record goes, and the key runs anew.
	if w := post("purge", url.Values{"scope": {"alice"}, "key": {"running"}}); w.Code != http.StatusConflict {
		t.Fatalf("purge in flight: %d %s", w.Code, w.Body)
	}
	w = post("purge", url.Values{"scope": {"alice"}, "key": {"done"}})
	if w.Code != 200 || decode[map[string]any](t, w)["purged"] != true {
		t.Fatalf("purge: %d %s", w.Code, w.Body)
	}
	if w := get("inspect?scope=alice&key=done"); w.Code != http.StatusNotFound {
		t.Fatalf("inspect after purge: %d %s", w.Code, w.Body)
	}
	lock(t, eng, "alice", "done").Release(0, nil)
	if w := post("purge?scope=alice&key=done", nil); w.Code != http.StatusNotFound {
		t.Fatalf("purge of nothing: %d %s", w.Code, w.Body)
	}

	// unlock: the stuck lock goes, and a retry takes the key.
	w = post("unlock?scope=bob&key=stuck", nil)
	if w.Code != 200 || decode[map[string]any](t, w)["unlocked"] != true {
		t.Fatalf("unlock: %d %s", w.Code, w.Body)
	}
	lock(t, eng, "bob", "stuck").Release(0, nil)
	if w := post("unlock?scope=bob&key=stuck", nil); w.Code != http.StatusNotFound {
		t.Fatalf("unlock of nothing: %d %s", w.Code, w.Body)
	}
}

func TestHandlerBadRequests(t *testing.T) {
	t.Parallel()
	h := admin.Handler(core.NewMemoryStore(0), admin.BearerToken("s3cret"))
	tests := []struct {
		method, path string
		want         int
		allow        string
	}{
		{"GET", "inspect", http.StatusBadRequest, ""},
		{"GET", "inspect?scope=alice", http.StatusBadRequest, ""},
		{"GET", "inspect?id=xyz", http.StatusBadRequest, ""},
		{"GET", "inspect?id=" + core.ID("a", "b", "") + "&key=b", http.StatusBadRequest, ""},
		{"GET", "inspect?scope=alice&key=nothing", http.StatusNotFound, ""},
		{"GET", "inflight?limit=0", http.StatusBadRequest, ""},
		{"GET", "inflight?limit=1001", http.StatusBadRequest, ""},
		{"GET", "inflight?limit=x", http.StatusBadRequest, ""},
		{"POST", "inspect?scope=alice&key=k", http.StatusMethodNotAllowed, "GET"},
		{"GET", "purge?scope=alice&key=k", http.StatusMethodNotAllowed, "POST"},
		{"DELETE", "unlock?scope=alice&key=k", http.StatusMethodNotAllowed, "POST"},
		{"GET", "flush", http.StatusNotFound, ""},
		{"GET", "", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		w := serve(h, tt.method, prefix+tt.path, bearer, nil)
		p := decode[map[string]any](t, w)
		if w.Code != tt.want || w.Header().Get("Allow") != tt.allow || p["status"] != float64(tt.want) || p["detail"] == "" {
			t.Errorf("%s %s: %d (Allow %q) %s; want %d (Allow %q)", tt.method, tt.path, w.Code, w.Header().Get("Allow"), w.Body, tt.want, tt.allow)
		}
	}
}

// downStore fails every admin operation, as a store that is down.
type downStore struct{}

var errDown = errors.New("connection refused")

func (downStore) Inspect(context.Context, string) (core.KeyState, error) {
	return core.KeyState{}, errDown
}
func (downStore) Purge(context.Context, string) error                    { return errDown }
func (downStore) Unlock(context.Context, string) error                   { return errDown }
func (downStore) InFlight(context.Context, int) ([]core.KeyState, error) { return nil, errDown }

func TestHandlerStoreDown(t *testing.T) {
	t.Parallel()
	h := admin.Handler(downStore{}, admin.BearerToken("s3cret"))
	for _, req := range []struct{ method, path string }{
		{"GET", "inspect?scope=alice&key=k"},
		{"POST", "purge?scope=alice&key=k"},
		{"POST", "unlock?scope=alice&key=k"},
		{"GET", "inflight"},
	} {
		w := serve(h, req.method, prefix+req.path, bearer, nil)
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "connection refused") {
			t.Errorf("%s %s on a store that is down: %d %s", req.method, req.path, w.Code, w.Body)
		}
	}
	if _, err := admin.OldestInFlight(context.Background(), downStore{}); !errors.Is(err, errDown) {
		t.Errorf("OldestInFlight: %v", err)
	}
}

// TestHandlerConcurrentPurges: operators purging one key while requests
// retry it: every purge that succeeds lets exactly one request run again.
func TestHandlerConcurrentPurges(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(0)
	eng := newEngine(t, store)
	h := admin.Handler(store, admin.BearerToken("s3cret"))
	complete(t, eng, "alice", "k", &core.Record{Code: 201})
	const purges = 50
	runs := make(chan struct{}, 2*purges)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			l, _, err := eng.Acquire(&core.Call{Scope: "alice", Key: "k", Fingerprint: [32]byte{1}})
			if err == nil && l != nil {
				runs <- struct{}{}
				l.Complete(&core.Record{Code: 201})
			}
		}
	}()
	purged := 0
	for deadline := time.Now().Add(time.Minute); purged < purges && time.Now().Before(deadline); {
		switch w := serve(h, "POST", prefix+"purge?scope=alice&key=k", bearer, nil); w.Code {
		case http.StatusOK:
			purged++
		case http.StatusConflict, http.StatusNotFound:
		default:
			t.Fatalf("purge: %d %s", w.Code, w.Body)
		}
	}
	close(stop)
	<-done
	if n := len(runs); purged != purges || (n != purged && n != purged-1) {
		t.Fatalf("%d runs after %d purges, want %d (or one fewer)", n, purged, purges)
	}
}
