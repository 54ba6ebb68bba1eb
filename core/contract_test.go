package core_test

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

func TestStoredHeaders(t *testing.T) {
	tests := []struct {
		name      string
		cfg       core.Config
		kept, not []string
	}{
		{"deny list", core.Config{}, []string{"Location", "X-Custom"}, []string{"Set-Cookie", "Set-Cookie2", "X-Hop"}},
		{"allow list", core.Config{KeepHeaders: []string{"location", "Set-Cookie"}}, []string{"Location"},
			[]string{"X-Custom", "Set-Cookie", "Set-Cookie2", "X-Hop"}},
		// A deny list adds to the base list: it never lets a cookie or a
		// hop-by-hop header through, nor one that Connection names.
		{"own deny list", core.Config{DeniedHeaders: []string{"X-Custom"}}, []string{"Location"},
			[]string{"X-Custom", "Set-Cookie", "Set-Cookie2", "Keep-Alive", "X-Hop"}},
		{"empty deny list", core.Config{DeniedHeaders: []string{}}, []string{"Location", "X-Custom"}, []string{"Set-Cookie", "Set-Cookie2", "Keep-Alive", "X-Hop"}},
		{"empty allow list is unset", core.Config{KeepHeaders: []string{}}, []string{"Location", "X-Custom"}, []string{"Set-Cookie", "Set-Cookie2", "X-Hop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng, err := core.New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, k := range []string{"Location", "X-Custom", "Set-Cookie", "Set-Cookie2", "Keep-Alive", "X-Hop"} {
					w.Header().Set(k, "v")
				}
				w.Header().Set("Connection", "keep-alive, x-hop") // X-Hop is hop-by-hop too
				w.WriteHeader(http.StatusCreated)
			}))
			post(t, h, "headers", "{}")
			w := post(t, h, "headers", "{}")
			if w.Header().Get(core.HeaderReplay) != "true" {
				t.Fatal("not replayed")
			}
			for _, k := range tt.kept {
				if w.Header().Get(k) != "v" {
					t.Errorf("%s not replayed", k)
				}
			}
			for _, k := range tt.not {
				if w.Header().Get(k) != "" {
					t.Errorf("%s replayed", k)
				}
			}
		})
	}
}

func TestReplayHeaderName(t *testing.T) {
	eng, _ := core.New(core.Config{ReplayHeader: "idempotent-replayed"})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	post(t, h, "stripe", "{}")
	w := post(t, h, "stripe", "{}")
	if w.Header().Get("Idempotent-Replayed") != "true" || w.Header().Get(core.HeaderReplay) != "" {
		t.Fatalf("replay headers %v, want Idempotent-Replayed: true only", w.Header())
	}
}

func TestProblemDocsURL(t *testing.T) {
	const docs = "https://api.example/docs/idempotency"
	for _, base := range []string{"", docs} {
		eng, _ := core.New(core.Config{ProblemDocsURL: base})
		h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		w := post(t, h, "a, b", "{}")
		var p core.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusBadRequest {
			t.Fatalf("status %d, body %s", w.Code, w.Body)
		}
		wantType, wantLink := problemType("invalid-key"), ""
		if base != "" {
			wantType, wantLink = docs+"#invalid-key", "<"+docs+`>; rel="describedby"`
		}
		if p.Type != wantType || w.Header().Get("Link") != wantLink {
			t.Fatalf("base %q: type %q, Link %q; want %q, %q", base, p.Type, w.Header().Get("Link"), wantType, wantLink)
		}
	}
}

// appsOwn is an error handler that renders a refusal its own way and
// keeps its Problem in got.
func appsOwn(got **core.Problem) func(http.ResponseWriter, *http.Request, *core.Problem) {
	return func(w http.ResponseWriter, r *http.Request, p *core.Problem) {
		*got = p
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(p.Status)
		w.Write([]byte("app's own: " + p.Title)) //nolint:errcheck
	}
}

func TestMiddlewareWithErrorHandler(t *testing.T) {
	eng, _ := core.New(core.Config{Required: true})
	var got *core.Problem
	h := eng.MiddlewareWithErrorHandler(appsOwn(&got))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("handler ran") }))
	w := post(t, h, "", "{}")
	if got == nil || got.Type != problemType("missing-key") || w.Code != http.StatusBadRequest || !strings.HasPrefix(w.Body.String(), "app's own") {
		t.Fatalf("problem %+v, status %d, body %q", got, w.Code, w.Body)
	}
}

// A Buffered flight whose commit fails answers 503 store-unavailable
// without any of the handler's response: through the error handler of
// MiddlewareWithErrorHandler as the other refusals, Retry-After kept, or
// as problem+json through Middleware.
func TestMiddlewareBufferedFailedCommit(t *testing.T) {
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	store.FailCommits(true)
	eng, _ := core.New(core.Config{Store: store})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Order-Id", "42")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("created")) //nolint:errcheck
	})
	var got *core.Problem
	withHandler := eng.MiddlewareWithErrorHandler(appsOwn(&got))(handler)
	w := post(t, withHandler, "failed-commit-1", "{}")
	if got == nil || got.Type != problemType("store-unavailable") || w.Code != http.StatusServiceUnavailable ||
		w.Body.String() != "app's own: Idempotency store unavailable" || w.Header().Get("Retry-After") == "" || w.Header().Get("X-Order-Id") != "" {
		t.Fatalf("with an error handler: problem %+v, %d %v %q", got, w.Code, w.Header(), w.Body)
	}
	w = post(t, eng.Middleware(handler), "failed-commit-2", "{}")
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "store-unavailable") || w.Header().Get("X-Order-Id") != "" {
		t.Fatalf("without: %d %v %q", w.Code, w.Header(), w.Body)
	}
}

func TestInfoFromContext(t *testing.T) {
	eng, _ := core.New(core.Config{Scope: func(r *core.Request) string { return r.Header.Get("X-User") }})
	var info core.Info
	var ok bool
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok = core.InfoFromContext(r.Context())
		w.WriteHeader(http.StatusCreated)
	}))
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
	r.Header.Set("Idempotency-Key", `"k-1";p=1`)
	r.Header.Set("X-User", "u-7")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if !ok || info.Key != "k-1" || info.Scope != "u-7" || info.Fingerprint == [32]byte{} || info.Fingerprint == sha256.Sum256(nil) {
		t.Fatalf("InfoFromContext = %+v, %v", info, ok)
	}
	post(t, h, "", "{}") // no key: the handler runs without one
	if ok {
		t.Fatal("InfoFromContext reported a key for a request without one")
	}
}

// SetHeaders gives an error handler a refusal's headers but its
// Content-Type, which the handler's own body sets.
func TestResponseSetHeaders(t *testing.T) {
	dst := http.Header{"Content-Type": {"text/html"}}
	(&core.Response{Header: http.Header{"Content-Type": {contentTypeProblem}, "Retry-After": {"1"}}}).SetHeaders(dst)
	if len(dst) != 2 || dst.Get("Content-Type") != "text/html" || dst.Get("Retry-After") != "1" {
		t.Fatalf("headers %v", dst)
	}
}

// problemType is the type URI of the problem name, as docs/problems.md
// documents it.
func problemType(name string) string {
	return "https://github.com/idem-go/idem/blob/main/docs/problems.md#" + name
}

// contentTypeProblem is the media type of the Engine's refusals (RFC 9457).
const contentTypeProblem = "application/problem+json"

// Trailers set after the body, the two ways net/http takes them (a name
// the Trailer header declared, a key with http.TrailerPrefix), as
// connect-go's gRPC protocol sends its Grpc-Status: the replay sends them
// too, over HTTP/2 and HTTP/1.1, and the storage policy still applies.
func TestStoredTrailersSetAfterBody(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		srv, runs := trailerServer(t, h2, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Checksum")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("ok")) //nolint:errcheck
			w.Header().Set("X-Checksum", "c1")
			w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
			w.Header().Set(http.TrailerPrefix+"X-Request-Id", "first")
		})
		for i := range 2 {
			resp, body := postTrailers(t, srv)
			if resp.StatusCode != http.StatusCreated || string(body) != "ok" {
				t.Fatalf("HTTP/2 %v, #%d: %d %q, want 201 ok", h2, i+1, resp.StatusCode, body)
			}
			if got, want := resp.Header.Get(core.HeaderReplay), map[bool]string{true: "true"}[i == 1]; got != want {
				t.Errorf("HTTP/2 %v, #%d: replay header %q, want %q", h2, i+1, got, want)
			}
			if c, s := resp.Trailer.Get("X-Checksum"), resp.Trailer.Get("Grpc-Status"); c != "c1" || s != "0" {
				t.Errorf("HTTP/2 %v, #%d: trailers X-Checksum %q, Grpc-Status %q; want c1 and 0", h2, i+1, c, s)
			}
			if got := resp.Trailer.Get("X-Request-Id"); i == 1 && got != "" {
				t.Errorf("HTTP/2 %v: the replay sent the first response's X-Request-Id trailer %q (DeniedHeaders)", h2, got)
			}
		}
		srv.Close()
		if *runs != 1 {
			t.Errorf("HTTP/2 %v: %d runs, want 1", h2, *runs)
		}
	}
}

// trailerServer serves h behind an Engine's middleware over TLS, HTTP/2 if
// h2, and counts h's runs in the int it returns.
func trailerServer(t *testing.T, h2 bool, h http.HandlerFunc) (*httptest.Server, *int) {
	t.Helper()
	eng, err := core.New(core.Config{Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	runs := new(int)
	srv := httptest.NewUnstartedServer(eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*runs++
		h(w, r)
	})))
	srv.EnableHTTP2 = h2
	srv.StartTLS()
	return srv, runs
}

// postTrailers posts to srv's /trailers with the key "trailers" and returns
// the response and its body, read to its end: its trailers are then set.
func postTrailers(t *testing.T, srv *httptest.Server) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/trailers", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "trailers")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body
}

// A handler's trailer set with http.TrailerPrefix is judged by the storage
// policy as the header it names: net/http's HTTP/2 server sends it on the
// replay too, so a Set-Cookie trailer would reach whoever replays.
func TestStoredTrailerPrefix(t *testing.T) {
	srv, runs := trailerServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(http.TrailerPrefix+"Set-Cookie", "session=secret")
		w.Header().Set(http.TrailerPrefix+"X-Request-Id", "first")
		w.Header().Set(http.TrailerPrefix+"X-Checksum", "c1")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("ok")) //nolint:errcheck
	})
	defer srv.Close()
	var last *http.Response
	for range 2 {
		resp, body := postTrailers(t, srv)
		if resp.StatusCode != http.StatusCreated || string(body) != "ok" {
			t.Fatalf("%d %q, want 201 ok", resp.StatusCode, body)
		}
		last = resp
	}
	if *runs != 1 || last.Header.Get(core.HeaderReplay) != "true" {
		t.Fatalf("%d runs, replay %q: want 1 run and a replay", *runs, last.Header.Get(core.HeaderReplay))
	}
	if got := last.Trailer.Get("Set-Cookie"); got != "" {
		t.Errorf("the replay sent the first response's Set-Cookie trailer %q", got)
	}
	if got := last.Trailer.Get("X-Request-Id"); got != "" {
		t.Errorf("the replay sent the first response's X-Request-Id trailer %q (DeniedHeaders)", got)
	}
	if got := last.Trailer.Get("X-Checksum"); got != "c1" {
		t.Errorf("the replay's X-Checksum trailer is %q, want c1 (not denied)", got)
	}
}
