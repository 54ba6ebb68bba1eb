package admin_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/seal"
)

const prefix = "/admin/idempotency/"

// serve sends one request to h, with params as a JSON object body if not
// nil, and returns the response.
func serve(h http.Handler, method, target string, header http.Header, params url.Values) *httptest.ResponseRecorder {
	var r *http.Request
	if params != nil {
		obj := map[string]string{}
		for k := range params {
			obj[k] = params.Get(k)
		}
		b, _ := json.Marshal(obj)
		r = httptest.NewRequest(method, target, bytes.NewReader(b))
		r.Header.Set("Content-Type", "application/json")
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
	if _, err := store.Inspect(context.Background(), core.ID("alice", "k1", "")); err != nil {
		t.Fatalf("record after a refused purge: %v", err)
	}
	if st, err := store.Inspect(context.Background(), core.ID("alice", "k2", "")); err != nil || st.LockedAt.IsZero() {
		t.Fatalf("lock after a refused unlock: %+v, %v", st, err)
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

	h := admin.Handler(store, admin.BearerToken("s3cret"), admin.WithBodyAuthorizer(admin.BearerToken("s3cret")))
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

// txHeldStore refuses to unlock, as pgstore's transactional mode does for
// a key that a transaction holds.
type txHeldStore struct{ downStore }

func (txHeldStore) Unlock(context.Context, string) error {
	return fmt.Errorf("%w: held by PostgreSQL session 7", core.ErrInFlight)
}

// A store's refusal that says who holds the key reaches the operator.
func TestHandlerUnlockRefused(t *testing.T) {
	t.Parallel()
	w := serve(admin.Handler(txHeldStore{}, admin.BearerToken("s3cret")), "POST", prefix+"unlock?scope=alice&key=k", bearer, nil)
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "held by PostgreSQL session 7") {
		t.Errorf("unlock of a key a transaction holds: %d %s", w.Code, w.Body)
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

// TestHandlerBodyPermission: stored headers and bodies (inspect with
// body=1) need the body authorizer as well; without one, or refused by it,
// they are 403 and nothing of them is shown.
func TestHandlerBodyPermission(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(0)
	complete(t, newEngine(t, store), "alice", "done", &core.Record{Code: 201, Header: map[string][]string{"X-Card": {"4111"}}, Body: []byte(`{"card":"4111"}`)})
	const path = prefix + "inspect?scope=alice&key=done&body=1"
	bodies := func(r *http.Request) bool { return r.Header.Get("X-Role") == "auditor" }
	for _, tc := range []struct {
		name   string
		h      http.Handler
		header http.Header
		want   int
	}{
		{"no body authorizer", admin.Handler(store, admin.BearerToken("s3cret")), bearer, http.StatusForbidden},
		{"refused by it", admin.Handler(store, admin.BearerToken("s3cret"), admin.WithBodyAuthorizer(bodies)), bearer, http.StatusForbidden},
		{"accepted by it, not by the authorizer", admin.Handler(store, admin.BearerToken("s3cret"), admin.WithBodyAuthorizer(bodies)),
			http.Header{"X-Role": {"auditor"}}, http.StatusUnauthorized},
		{"accepted by both", admin.Handler(store, admin.BearerToken("s3cret"), admin.WithBodyAuthorizer(bodies)),
			http.Header{"Authorization": bearer["Authorization"], "X-Role": {"auditor"}}, http.StatusOK},
	} {
		w := serve(tc.h, "GET", path, tc.header, nil)
		if w.Code != tc.want || w.Code != http.StatusOK && strings.Contains(w.Body.String(), "4111") {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body, tc.want)
		}
		if w.Code == http.StatusOK && decode[admin.Key](t, w).Body != `{"card":"4111"}` {
			t.Errorf("%s: %s, want the body", tc.name, w.Body)
		}
	}
	// Without body=1, the handler's authorizer alone suffices.
	if w := serve(admin.Handler(store, admin.BearerToken("s3cret")), "GET", prefix+"inspect?scope=alice&key=done", bearer, nil); w.Code != http.StatusOK {
		t.Errorf("inspect without body: %d %s", w.Code, w.Body)
	}
}

// TestHandlerUnsafeRequests: purge and unlock take their parameters from
// the query or a JSON body; a form-encoded or otherwise typed body (what a
// cross-site form can send) is refused, and so is a browser's cross-origin
// request, whatever credentials it carries (an app's cookie-based
// authorizer would accept them).
func TestHandlerUnsafeRequests(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(0)
	eng := newEngine(t, store)
	cookie := func(r *http.Request) bool { c, err := r.Cookie("session"); return err == nil && c.Value == "admin" }
	h := admin.Handler(store, cookie)
	send := func(method, target, contentType, body string, header http.Header) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		r.Host = "ops.example.com"
		r.Header.Set("Cookie", "session=admin")
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		for k, v := range header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	complete(t, eng, "alice", "k", &core.Record{Code: 201})
	for _, tc := range []struct {
		name, contentType, body string
		header                  http.Header
		want                    int
	}{
		{"form", "application/x-www-form-urlencoded", "scope=alice&key=k", nil, http.StatusUnsupportedMediaType},
		{"multipart", "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--x--\r\n", nil,
			http.StatusUnsupportedMediaType},
		{"text/plain", "text/plain", `{"scope":"alice","key":"k"}`, nil, http.StatusUnsupportedMediaType},
		{"cross-site fetch", "", "", http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"another origin", "application/json", `{"scope":"alice","key":"k"}`, http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"too large", "application/json", `{"scope":"alice","key":"k"}` + strings.Repeat(" ", 64<<10), nil, http.StatusRequestEntityTooLarge},
	} {
		for _, op := range []string{"purge", "unlock"} {
			target := prefix + op
			if tc.body == "" {
				target += "?scope=alice&key=k"
			}
			if w := send("POST", target, tc.contentType, tc.body, tc.header); w.Code != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.name, op, w.Code, w.Body, tc.want)
			}
		}
		if _, err := store.Inspect(context.Background(), core.ID("alice", "k", "")); err != nil {
			t.Fatalf("%s: the record is gone: %v", tc.name, err)
		}
	}
	// Same origin, a JSON body or the query: accepted.
	for i, tc := range []struct {
		target, contentType, body string
		header                    http.Header
	}{
		{prefix + "purge", "application/json", `{"scope":"alice","key":"k"}`, http.Header{"Origin": {"https://ops.example.com"}, "Sec-Fetch-Site": {"same-origin"}}},
		{prefix + "purge?scope=alice&key=k", "", "", nil},
	} {
		if i > 0 {
			complete(t, eng, "alice", "k", &core.Record{Code: 201})
		}
		if w := send("POST", tc.target, tc.contentType, tc.body, tc.header); w.Code != http.StatusOK {
			t.Errorf("purge %s %s: %d %s", tc.target, tc.body, w.Code, w.Body)
		}
	}
}

// TestHandlerSealed: without WithSealer a sealed record shows its times
// and key id; with it, its scope and key, and its body with the body
// permission.
func TestHandlerSealed(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(0)
	keys, err := seal.ParseKeys("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, seal.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: store, Sealer: seal.New(keys)})
	if err != nil {
		t.Fatal(err)
	}
	complete(t, eng, "alice", "k", &core.Record{Code: 201, Body: []byte(`{"card":"4242"}`)})
	target := prefix + "inspect?scope=alice&key=k&body=1"
	token := admin.BearerToken("s3cret")

	w := serve(admin.Handler(store, token, admin.WithBodyAuthorizer(token)), http.MethodGet, target, bearer, nil)
	if k := decode[admin.Key](t, w); w.Code != 200 || k.SealedBy != "k1" || k.Scope != "" || strings.Contains(w.Body.String(), "4242") {
		t.Fatalf("without the sealer: %d %s", w.Code, w.Body)
	}
	w = serve(admin.Handler(store, token, admin.WithSealer(seal.New(keys))), http.MethodGet, prefix+"inspect?scope=alice&key=k", bearer, nil)
	if k := decode[admin.Key](t, w); w.Code != 200 || k.Scope != "alice" || k.Code != 201 || strings.Contains(w.Body.String(), "4242") {
		t.Fatalf("with the sealer, without the body: %d %s", w.Code, w.Body)
	}
	w = serve(admin.Handler(store, token, admin.WithSealer(seal.New(keys)), admin.WithBodyAuthorizer(token)), http.MethodGet, target, bearer, nil)
	if k := decode[admin.Key](t, w); w.Code != 200 || k.Body != `{"card":"4242"}` {
		t.Fatalf("with the sealer and the body permission: %d %s", w.Code, w.Body)
	}
}

// TestHandlerPurgeReplayCache: with Config.ReplayCache on, a purge through
// the handler drops this process's copy too: the next request with the key
// runs the handler again instead of replaying the cached record.
func TestHandlerPurgeReplayCache(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(0)
	eng, err := core.New(core.Config{Store: store, ReplayCache: 1 << 20,
		Scope: func(r *core.Request) string { return r.Header.Get("X-User-ID") }})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	})))
	mux.Handle(prefix, admin.Handler(store, admin.BearerToken("s3cret")))
	order := func() string {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`))
		r.Header.Set("X-User-ID", "alice")
		r.Header.Set("Idempotency-Key", "order-1")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Header().Get(core.HeaderReplay)
	}
	order()
	if order() != "true" || runs != 1 { // replayed, and now cached
		t.Fatalf("second request: %d runs, want a replay", runs)
	}
	if w := serve(mux, "POST", prefix+"purge?scope=alice&key=order-1", bearer, nil); w.Code != http.StatusOK {
		t.Fatalf("purge: %d %s", w.Code, w.Body)
	}
	if replay := order(); replay != "" || runs != 2 {
		t.Fatalf("after the purge: replay %q, %d runs; want the handler run again", replay, runs)
	}
}

// deadlineStore records the deadline of the context each admin operation
// gets, and fails it as a store that is down.
type deadlineStore struct {
	deadlines chan time.Duration // time left at the call; -1 without a deadline
}

func (s deadlineStore) record(ctx context.Context) {
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	s.deadlines <- left
}

func (s deadlineStore) Inspect(ctx context.Context, _ string) (core.KeyState, error) {
	s.record(ctx)
	return core.KeyState{}, errDown
}
func (s deadlineStore) Purge(ctx context.Context, _ string) error  { s.record(ctx); return errDown }
func (s deadlineStore) Unlock(ctx context.Context, _ string) error { s.record(ctx); return errDown }
func (s deadlineStore) InFlight(ctx context.Context, _ int) ([]core.KeyState, error) {
	s.record(ctx)
	return nil, errDown
}

// Every store call of the handler is bounded, by DefaultTimeout or
// WithTimeout's: a store whose client rides out an outage (redislock.NewClient
// redials a Redis that is down until the call's deadline) answers the
// operator 503 within it, not when the client gives up.
func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts []admin.Option
		want time.Duration
	}{
		{nil, admin.DefaultTimeout},
		{[]admin.Option{admin.WithTimeout(time.Minute)}, time.Minute},
	} {
		store := deadlineStore{deadlines: make(chan time.Duration, 1)}
		h := admin.Handler(store, admin.BearerToken("s3cret"), tc.opts...)
		for _, req := range []struct{ method, path string }{
			{"GET", "inspect?scope=alice&key=k"},
			{"POST", "purge?scope=alice&key=k"},
			{"POST", "unlock?scope=alice&key=k"},
			{"GET", "inflight"},
		} {
			w := serve(h, req.method, prefix+req.path, bearer, nil)
			if w.Code != http.StatusServiceUnavailable {
				t.Errorf("%s %s: %d %s", req.method, req.path, w.Code, w.Body)
			}
			if left := <-store.deadlines; left <= 0 || left > tc.want {
				t.Errorf("%s %s: the store call had %v left, want a bound of %v", req.method, req.path, left, tc.want)
			}
		}
	}
}

func TestHandlerNilStorePanics(t *testing.T) {
	defer func() {
		if r := recover(); r != "admin: Handler with a nil store" {
			t.Fatalf("recovered %v", r)
		}
	}()
	admin.Handler(nil, nil)
}
