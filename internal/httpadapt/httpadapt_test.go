package httpadapt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"

	"github.com/idem-go/idem/core"
)

// fakeHeader stands in for fasthttp's request and response headers: names
// matched byte for byte, values in buffers that the test overwrites, as
// fasthttp reuses its own.
type fakeHeader struct{ kv [][2][]byte }

func (h *fakeHeader) add(k, v string) { h.kv = append(h.kv, [2][]byte{[]byte(k), []byte(v)}) }

func (h *fakeHeader) Peek(key string) []byte {
	if all := h.PeekAll(key); len(all) > 0 {
		return all[0]
	}
	return nil
}

func (h *fakeHeader) PeekAll(key string) [][]byte {
	var all [][]byte
	for _, kv := range h.kv {
		if string(kv[0]) == key {
			all = append(all, kv[1])
		}
	}
	return all
}

func (h *fakeHeader) VisitAll(f func(k, v []byte)) {
	for _, kv := range h.kv {
		f(kv[0], kv[1])
	}
}

func (h *fakeHeader) Len() int { return len(h.kv) }

func (h *fakeHeader) Set(k, v string) {
	h.kv = slices.DeleteFunc(h.kv, func(kv [2][]byte) bool { return string(kv[0]) == k })
	h.add(k, v)
}

func (h *fakeHeader) Add(k, v string) { h.add(k, v) }

// scribble overwrites every buffer, as fasthttp does with the next request.
func (h *fakeHeader) scribble() {
	for _, kv := range h.kv {
		for i := range kv[1] {
			kv[1][i] = '#'
		}
	}
}

func TestFastHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		headers []string // name, value pairs
		fold    bool
		want    []string // Values("Idempotency-Key")
	}{
		{"absent", nil, false, nil},
		{"empty", []string{"Idempotency-Key", ""}, false, []string{""}},
		{"one", []string{"Idempotency-Key", "k1"}, false, []string{"k1"}},
		{"repeated", []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, false, []string{"a", "b"}},
		{"lower case, not folded", []string{"idempotency-key", "k1"}, false, nil},
		{"lower case, folded", []string{"idempotency-key", "k1"}, true, []string{"k1"}},
		{"two cases, folded", []string{"idempotency-key", "a", "IDEMPOTENCY-KEY", "b"}, true, []string{"a", "b"}},
		{"another name, folded", []string{"Idempotency-Keys", "k1"}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &fakeHeader{}
			for i := 0; i+1 < len(tc.headers); i += 2 {
				h.add(tc.headers[i], tc.headers[i+1])
			}
			header, keyed := FastHeaders(h, tc.fold)
			got := header.Values("Idempotency-Key")
			first := header.Get("Idempotency-Key")
			if present := keyed.Values("Idempotency-Key") != nil; present != (got != nil) {
				t.Fatalf("keyed says present=%v, header's values are %q", present, got)
			}
			h.scribble()
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Values = %q, want %q (copied before the buffers were reused)", got, tc.want)
			}
			if want := ""; len(tc.want) > 0 {
				want = tc.want[0]
				if first != want {
					t.Fatalf("Get = %q, want %q", first, want)
				}
			}
		})
	}
}

func TestResponseHeaders(t *testing.T) {
	t.Parallel()
	rh := &fakeHeader{}
	rh.add("Content-Type", "text/plain")
	preset := HeaderSink{Preset: true}
	rh.VisitAll(preset.Add)
	if preset.Header != nil {
		t.Fatalf("preset headers with fasthttp's default Content-Type only = %v, want nil", preset.Header)
	}
	rh.add("x-request-id", "r1")
	rh.add("Vary", "Origin")
	rh.add("Vary", "Accept")
	preset, all := HeaderSink{Preset: true}, HeaderSink{}
	rh.VisitAll(preset.Add)
	rh.VisitAll(all.Add)
	rh.scribble()
	want := http.Header{"X-Request-Id": {"r1"}, "Vary": {"Origin", "Accept"}}
	if !equalHeader(preset.Header, want) {
		t.Fatalf("preset headers = %v, want %v", preset.Header, want)
	}
	want["Content-Type"] = []string{"text/plain"}
	if !equalHeader(all.Header, want) {
		t.Fatalf("all headers = %v, want %v", all.Header, want)
	}
}

// More headers than the sink holds values for inline, one repeated, and
// common values: each header's values are its own, copied out of
// fasthttp's buffers, and an append to one leaves the next alone.
func TestHeaderSinkValues(t *testing.T) {
	t.Parallel()
	rh := &fakeHeader{}
	want := http.Header{}
	for i := range 6 {
		name, value := fmt.Sprintf("X-H%d", i), fmt.Sprintf("v%d", i)
		rh.add(name, value)
		want[name] = []string{value}
	}
	rh.add("X-H1", "again")
	want["X-H1"] = append(want["X-H1"], "again")
	rh.add("Content-Type", "application/json")
	want["Content-Type"] = []string{"application/json"}
	var s HeaderSink
	rh.VisitAll(s.Add)
	rh.scribble()
	if !equalHeader(s.Header, want) {
		t.Fatalf("headers = %v, want %v", s.Header, want)
	}
	s.Header["X-H0"] = append(s.Header["X-H0"], "added")
	if got := s.Header["X-H2"]; !slices.Equal(got, []string{"v2"}) {
		t.Fatalf("X-H2 = %q after an append to X-H0", got)
	}
}

func headersOf(rh *fakeHeader) http.Header {
	var s HeaderSink
	rh.VisitAll(s.Add)
	return s.Header
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

type fakeResponse struct {
	status int
	body   []byte
}

func (r *fakeResponse) SetStatusCode(code int) { r.status = code }
func (r *fakeResponse) SetBody(b []byte)       { r.body = append(r.body[:0], b...) }

func TestWriteResponse(t *testing.T) {
	t.Parallel()
	rh := &fakeHeader{}
	rh.add("Content-Type", "text/plain") // fasthttp's default, replaced
	rh.add("Retry-After", "9")           // an older value, replaced
	res := &fakeResponse{}
	WriteResponse(res, rh, &core.Response{StatusCode: 201, Body: []byte("stored"), Header: http.Header{
		"Content-Type": {"application/json"}, "Retry-After": {"1"}, "Vary": {"A", "B"}}})
	if res.status != 201 || string(res.body) != "stored" {
		t.Fatalf("wrote %d %q", res.status, res.body)
	}
	if got := headersOf(rh); !equalHeader(got, http.Header{
		"Content-Type": {"application/json"}, "Retry-After": {"1"}, "Vary": {"A", "B"}}) {
		t.Fatalf("headers %v", got)
	}

	// A record a net/http adapter stored with trailers (http.TrailerPrefix):
	// fasthttp would write "Trailer:Grpc-Status: 0", a header "Trailer" to
	// the client, and sends no trailers with a body of known length.
	rh = &fakeHeader{}
	WriteResponse(res, rh, &core.Response{StatusCode: 200, Body: []byte("ok"), Header: http.Header{
		"Content-Type": {"application/grpc"}, http.TrailerPrefix + "Grpc-Status": {"0"}}})
	if got := headersOf(rh); !equalHeader(got, http.Header{"Content-Type": {"application/grpc"}}) {
		t.Fatalf("a record with a trailer: headers %v, want Content-Type only", got)
	}

	rh = &fakeHeader{}
	FastProblemHeaders(rh, &core.Response{Header: http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"1"}}})
	if got := headersOf(rh); !equalHeader(got, http.Header{"Retry-After": {"1"}}) {
		t.Fatalf("FastProblemHeaders: %v, want Retry-After only", got)
	}
}

func TestStableMethod(t *testing.T) {
	buf := []byte("POST")
	post := string(buf) // not the constant
	var m string
	if n := testing.AllocsPerRun(10, func() { m = StableMethod(post) }); n != 0 || m != "POST" {
		t.Fatalf("StableMethod(POST) = %q with %v allocations, want the constant and none", m, n)
	}
	buf = []byte("PROPFIND")
	m = StableMethod(unsafe.String(&buf[0], len(buf))) // as Fiber's c.Method() points into its buffer
	copy(buf, "XXXXXXXX")
	if m != "PROPFIND" {
		t.Fatalf("StableMethod kept %q, want a copy", m)
	}
}

func TestContentLength(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]int64{-1: -1, -2: -1, 0: 0, 12: 12} {
		if got := ContentLength(in); got != want {
			t.Errorf("ContentLength(%d) = %d, want %d", in, got, want)
		}
	}
}

type fakeRequest struct {
	stream io.Reader
	body   []byte
}

func (r *fakeRequest) IsBodyStream() bool    { return r.stream != nil }
func (r *fakeRequest) BodyStream() io.Reader { return r.stream }
func (r *fakeRequest) Body() []byte          { return r.body }

func TestFastBody(t *testing.T) {
	t.Parallel()
	var st FastState
	if b := st.Body(&fakeRequest{}); b != nil {
		t.Fatalf("no body: %v, want nil", b)
	}
	if b, _ := io.ReadAll(st.Body(&fakeRequest{stream: strings.NewReader("streamed")})); string(b) != "streamed" {
		t.Fatalf("stream: %q", b)
	}
	b, _ := io.ReadAll(st.Body(&fakeRequest{body: []byte("bytes")}))
	if string(b) != "bytes" {
		t.Fatalf("body %q", b)
	}
	// fasthttp ends a stream cut short of its Content-Length with io.EOF.
	st.Req.ContentLength = 100
	if b, err := io.ReadAll(st.Body(&fakeRequest{stream: strings.NewReader("cut")})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a stream of 3 of its 100 bytes: %q, %v; want io.ErrUnexpectedEOF", b, err)
	}
}

func TestAppCache(t *testing.T) {
	t.Parallel()
	type app struct{ fold bool }
	a, b := &app{true}, &app{false}
	reads := 0
	read := func(x *app) bool { reads++; return x.fold }
	var c AppCache[*app, bool]
	for _, tc := range []struct {
		app   *app
		want  bool
		reads int
	}{{a, true, 1}, {a, true, 1}, {b, false, 2}, {b, false, 2}, {a, true, 3}} {
		if got := c.Get(tc.app, read); got != tc.want || reads != tc.reads {
			t.Fatalf("Get = %v after %d reads, want %v after %d", got, reads, tc.want, tc.reads)
		}
	}
}

type store map[any]any

func (s store) Get(k string) any             { return s[k] }
func (s store) Locals(k any, _ ...any) any   { return s[k] }
func (s store) set(k, v any) store           { s[k] = v; return s }
func ctxWith(k, v any) context.Context       { return context.WithValue(context.Background(), k, v) }
func valueOf(ctx context.Context, k any) any { return ctx.Value(k) }
func wantValue(t *testing.T, got, want any, what string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

type ctxKey struct{}

func TestContexts(t *testing.T) {
	t.Parallel()
	s := store{}.set("user", "alice").set(ctxKey{}, "local")
	base := ctxWith("tenant", "acme")
	v := &Values{Context: base, Store: s}
	wantValue(t, valueOf(v, "user"), "alice", "Values: the framework's store")
	wantValue(t, valueOf(v, "tenant"), "acme", "Values: the request's context")
	wantValue(t, valueOf(v, ctxKey{}), nil, "Values: a key that is not a string")
	l := LocalsContext{Context: base, Locals: s}
	wantValue(t, valueOf(l, "user"), "alice", "LocalsContext: Locals")
	wantValue(t, valueOf(l, ctxKey{}), "local", "LocalsContext: Locals, any key")
	wantValue(t, valueOf(l, "tenant"), "acme", "LocalsContext: the request's context")
}

// Protected drives a whole request: Begin, Capture, the handler, Finish.
func TestProtected(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Scope: func(r *core.Request) string { s, _ := r.Context.Value("user").(string); return s }})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	serve := func(user string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/orders/7?x=1", strings.NewReader(`{"qty":1}`))
		r.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		w.Header().Set("X-Before", "set by a middleware before")
		var p Protected
		f, resp := p.Begin(eng, r, "/orders/{id}", "", store{"user": user}, w)
		switch {
		case resp != nil:
			resp.Write(w)
			return w
		case f == nil:
			t.Fatal("not covered")
		}
		defer f.Abort()
		cw, r := f.ResponseWriter(w), f.Request(r)
		body, _ := io.ReadAll(r.Body)
		runs++
		cw.Header().Set("X-Run", string(rune('0'+runs)))
		cw.WriteHeader(http.StatusCreated)
		cw.Write(body) //nolint:errcheck
		f.Finish(nil)
		return w
	}
	first := serve("alice")
	replay := serve("alice")
	other := serve("bob")
	if first.Code != 201 || first.Body.String() != `{"qty":1}` || first.Header().Get(core.HeaderReplay) != "" {
		t.Fatalf("first: %d %q %v", first.Code, first.Body, first.Header())
	}
	if replay.Code != 201 || replay.Body.String() != `{"qty":1}` || replay.Header().Get(core.HeaderReplay) != "true" || replay.Header().Get("X-Run") != "1" {
		t.Fatalf("replay: %d %q %v", replay.Code, replay.Body, replay.Header())
	}
	if other.Header().Get(core.HeaderReplay) != "" || runs != 2 {
		t.Fatalf("another user's key is another record: replay %q, %d runs", other.Header().Get(core.HeaderReplay), runs)
	}
}

// A body read through Protected's BodyLimit wrapper allocates nothing (it
// wraps every keyed request's body), and keeps the limit's error alone.
func TestLimitedBodyReadAllocs(t *testing.T) {
	limit := errors.New("over the limit")
	src := strings.NewReader(strings.Repeat("x", 100))
	b := &limitedBody{ReadCloser: io.NopCloser(src), limit: func(err error) bool { return err == limit }}
	buf := make([]byte, 64)
	n := testing.AllocsPerRun(10, func() {
		src.Seek(0, io.SeekStart) //nolint:errcheck // a strings.Reader's Seek to 0 cannot fail
		for {
			if _, err := b.Read(buf); err != nil {
				break
			}
		}
	})
	if n != 0 || b.err != nil {
		t.Errorf("%v allocations per body, err %v; want none", n, b.err)
	}
	b.ReadCloser = io.NopCloser(iotest.ErrReader(limit))
	_, err := b.Read(buf)
	var tooLarge *http.MaxBytesError
	if !errors.Is(err, limit) || !errors.As(err, &tooLarge) || b.err != limit {
		t.Errorf("read %v, kept %v; want the limit's error kept, and read as a body too large", err, b.err)
	}
}
