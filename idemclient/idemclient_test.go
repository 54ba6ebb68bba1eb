package idemclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// start is the fake clock's first reading, whole seconds for HTTP dates.
var start = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeTime makes a Transport's waits instant: each is recorded and moves
// the clock on. Jitter is off: a backoff wait is its nominal value.
type fakeTime struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func useFakeTime(tr *Transport) *fakeTime {
	ft := &fakeTime{now: start}
	tr.now = func() time.Time { ft.mu.Lock(); defer ft.mu.Unlock(); return ft.now }
	tr.sleep = func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		ft.mu.Lock()
		defer ft.mu.Unlock()
		ft.waits = append(ft.waits, d)
		ft.now = ft.now.Add(d)
		return nil
	}
	tr.randN = func(n int64) int64 { return n / 2 }
	return ft
}

func (ft *fakeTime) Waits() []time.Duration {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return slices.Clone(ft.waits)
}

// seen is one request as the test server got it.
type seen struct {
	method, key, legacyKey, customKey, body string
}

// flaky is a test server that answers its first fails requests with fail,
// then 201 with the request body.
type flaky struct {
	fails int
	fail  func(w http.ResponseWriter, r *http.Request)
	ok    func(w http.ResponseWriter, r *http.Request) // default: 201 with the body

	mu   sync.Mutex
	reqs []seen
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, seen{r.Method, r.Header.Get("Idempotency-Key"), r.Header.Get("X-Idempotency-Key"), r.Header.Get("X-Request-Key"), string(b)})
	n := len(f.reqs)
	f.mu.Unlock()
	switch {
	case n <= f.fails:
		f.fail(w, r)
	case f.ok != nil:
		f.ok(w, r)
	default:
		w.WriteHeader(http.StatusCreated)
		w.Write(b) //nolint:errcheck
	}
}

func (f *flaky) Seen() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// serve starts f on loopback; the Transport's Base is a fresh net/http
// Transport without keep-alives, so that net/http never retries on its own
// (it does on a reused connection) and every attempt is one request seen.
func serve(t *testing.T, h http.Handler) (url string, base *http.Transport) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	base = &http.Transport{DisableKeepAlives: true}
	t.Cleanup(base.CloseIdleConnections)
	return srv.URL, base
}

func status(code int, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "attempt failed with %d", code)
	}
}

// problem answers code with a problem of type typ, served as contentType.
func problem(code int, contentType, typ string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"type":%q,"title":"Conflict","status":%d}`, typ, code)
	}
}

// hangUp closes the connection without a response; reset sends a TCP RST.
func hangUp(reset bool) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		if reset {
			conn.(*net.TCPConn).SetLinger(0) //nolint:errcheck
		}
		conn.Close()
	}
}

func post(t *testing.T, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRetriesWithOneKey(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name  string
		fail  func(http.ResponseWriter, *http.Request)
		waits []time.Duration
	}{
		{"connection closed", hangUp(false), []time.Duration{100 * ms, 200 * ms}},
		{"connection reset", hangUp(true), []time.Duration{100 * ms, 200 * ms}},
		{"409 Retry-After seconds", status(409, "Retry-After", "2"), []time.Duration{2 * time.Second, 2 * time.Second}},
		{"409 Retry-After over MaxDelay", status(409, "Retry-After", "3600"), []time.Duration{5 * time.Second, 5 * time.Second}},
		{"500 Retry-After over MaxDelay", status(500, "Retry-After", "3600"), []time.Duration{5 * time.Second, 5 * time.Second}},
		// The date is 3 s after the first attempt: the second attempt comes
		// at that date, so its wait is the backoff's.
		{"409 Retry-After date", status(409, "Retry-After", start.Add(3*time.Second).Format(http.TimeFormat)), []time.Duration{3 * time.Second, 200 * ms}},
		{"409 Retry-After shorter than the backoff", status(409, "Retry-After", "0"), []time.Duration{100 * ms, 200 * ms}},
		{"409 bad Retry-After", status(409, "Retry-After", "soon"), []time.Duration{100 * ms, 200 * ms}},
		{"409 key in flight", problem(409, "application/problem+json", keyInFlightType), []time.Duration{100 * ms, 200 * ms}},
		{"409 key in flight, ProblemDocsURL", problem(409, "application/problem+json; charset=utf-8", "https://api.example/errors#key-in-flight"),
			[]time.Duration{100 * ms, 200 * ms}},
		{"503", status(503), []time.Duration{100 * ms, 200 * ms}},
		{"503 Retry-After", status(503, "Retry-After", "1"), []time.Duration{time.Second, time.Second}},
		{"429 Retry-After", status(429, "Retry-After", "1"), []time.Duration{time.Second, time.Second}},
		{"429", status(429), []time.Duration{100 * ms, 200 * ms}},
		{"500", status(500), []time.Duration{100 * ms, 200 * ms}},
		{"502", status(502), []time.Duration{100 * ms, 200 * ms}},
		{"504", status(504), []time.Duration{100 * ms, 200 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &flaky{fails: 2, fail: tt.fail}
			url, base := serve(t, srv)
			tr := &Transport{Base: base}
			ft := useFakeTime(tr)
			const body = `{"item":"book","qty":2}`
			req := post(t, url, body)

			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := readBody(t, resp); resp.StatusCode != 201 || got != body {
				t.Fatalf("final response %d %q, want 201 %q", resp.StatusCode, got, body)
			}
			reqs := srv.Seen()
			if len(reqs) != 3 || Attempts(resp) != 3 {
				t.Fatalf("server saw %d requests, Attempts %d; want 3", len(reqs), Attempts(resp))
			}
			key, err := uuid.Parse(reqs[0].key)
			if err != nil || key.Version() != 4 || key.Variant() != uuid.RFC4122 {
				t.Fatalf("key %q is not a UUIDv4 (%v)", reqs[0].key, err)
			}
			for i, r := range reqs {
				if r.key != reqs[0].key || r.body != body {
					t.Errorf("attempt %d: key %q body %q; want %q %q", i+1, r.key, r.body, reqs[0].key, body)
				}
			}
			if got := resp.Request.Header.Get("Idempotency-Key"); got != reqs[0].key {
				t.Errorf("resp.Request carries key %q, the server saw %q", got, reqs[0].key)
			}
			if req.Header.Get("Idempotency-Key") != "" {
				t.Error("the caller's request was changed: it has a key")
			}
			if got := ft.Waits(); !slices.Equal(got, tt.waits) {
				t.Errorf("waits %v, want %v", got, tt.waits)
			}
			if Replayed(resp) {
				t.Error("Replayed is true without the replay header")
			}
		})
	}
}

// tracked records whether the bodies of the responses it returns were read
// to the end and closed.
type tracked struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	eof, closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { b.closed.Store(true); return b.ReadCloser.Close() }

func (tr *tracked) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := tr.base.RoundTrip(r)
	if err == nil {
		b := &trackedBody{ReadCloser: resp.Body}
		resp.Body = b
		tr.mu.Lock()
		tr.bodies = append(tr.bodies, b)
		tr.mu.Unlock()
	}
	return resp, err
}

func TestGivesUp(t *testing.T) {
	t.Parallel()
	t.Run("status", func(t *testing.T) {
		t.Parallel()
		srv := &flaky{fails: 100, fail: status(503)}
		url, base := serve(t, srv)
		tb := &tracked{base: base}
		tr := &Transport{Base: tb}
		ft := useFakeTime(tr)
		resp, err := tr.RoundTrip(post(t, url, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		if got := readBody(t, resp); resp.StatusCode != 503 || got != "attempt failed with 503" {
			t.Fatalf("final response %d %q, want the last 503 whole", resp.StatusCode, got)
		}
		if n := len(srv.Seen()); n != DefaultMaxAttempts || Attempts(resp) != n {
			t.Fatalf("server saw %d requests, Attempts %d; want %d", n, Attempts(resp), DefaultMaxAttempts)
		}
		if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}; !slices.Equal(ft.Waits(), want) {
			t.Errorf("waits %v, want %v", ft.Waits(), want)
		}
		for i, b := range tb.bodies[:len(tb.bodies)-1] {
			if !b.eof.Load() || !b.closed.Load() {
				t.Errorf("response %d: drained %v, closed %v; want both", i+1, b.eof.Load(), b.closed.Load())
			}
		}
	})
	t.Run("network", func(t *testing.T) {
		t.Parallel()
		srv := &flaky{fails: 100, fail: hangUp(false)}
		url, base := serve(t, srv)
		tr := &Transport{Base: base, MaxAttempts: 3}
		useFakeTime(tr)
		_, err := tr.RoundTrip(post(t, url, "{}"))
		if err == nil || !strings.HasPrefix(err.Error(), "idemclient: 3 attempts: ") {
			t.Fatalf("error %v, want one saying 3 attempts", err)
		}
		if n := len(srv.Seen()); n != 3 {
			t.Fatalf("server saw %d requests, want 3", n)
		}
	})
	t.Run("MaxAttempts 1", func(t *testing.T) {
		t.Parallel()
		srv := &flaky{fails: 100, fail: status(503)}
		url, base := serve(t, srv)
		tr := &Transport{Base: base, MaxAttempts: 1}
		ft := useFakeTime(tr)
		resp, err := tr.RoundTrip(post(t, url, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if reqs := srv.Seen(); len(reqs) != 1 || reqs[0].key == "" || len(ft.Waits()) != 0 {
			t.Fatalf("server saw %+v, waits %v; want one request with a key, no wait", reqs, ft.Waits())
		}
	})
}

func TestNotRetried(t *testing.T) {
	t.Parallel()
	for _, code := range []int{200, 201, 204, 301, 400, 401, 403, 404, 408, 412, 413, 422, 501, 600, 999} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			srv := &flaky{fails: 1, fail: status(code)}
			url, base := serve(t, srv)
			tr := &Transport{Base: base}
			ft := useFakeTime(tr)
			resp, err := tr.RoundTrip(post(t, url, "{}"))
			if err != nil {
				t.Fatal(err)
			}
			got := readBody(t, resp)
			if resp.StatusCode != code || (code != 204 && got != fmt.Sprintf("attempt failed with %d", code)) {
				t.Fatalf("response %d %q, want %d with its body", resp.StatusCode, got, code)
			}
			if n := len(srv.Seen()); n != 1 || Attempts(resp) != 1 || len(ft.Waits()) != 0 {
				t.Fatalf("server saw %d requests, Attempts %d, waits %v; want 1, 1, none", n, Attempts(resp), ft.Waits())
			}
		})
	}
}

// An application's own 409 will not change: it is returned, body whole.
func TestConflictNotRetried(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]func(http.ResponseWriter, *http.Request){
		"plain":                      status(409),
		"another problem":            problem(409, "application/problem+json", "https://api.example/errors#out-of-stock"),
		"key in flight, not problem": problem(409, "application/json", keyInFlightType),
		"long problem, body whole":   problem(409, "application/problem+json", "https://api.example/errors#"+strings.Repeat("x", 10000)),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := &flaky{fails: 1, fail: fail}
			url, base := serve(t, srv)
			tr := &Transport{Base: base}
			ft := useFakeTime(tr)
			resp, err := tr.RoundTrip(post(t, url, "{}"))
			if err != nil {
				t.Fatal(err)
			}
			want := httptest.NewRecorder()
			fail(want, nil)
			if got := readBody(t, resp); resp.StatusCode != 409 || got != want.Body.String() {
				t.Fatalf("response %d %q, want 409 %q", resp.StatusCode, got, want.Body)
			}
			if n := len(srv.Seen()); n != 1 || Attempts(resp) != 1 || len(ft.Waits()) != 0 {
				t.Fatalf("server saw %d requests, Attempts %d, waits %v; want 1, 1, none", n, Attempts(resp), ft.Waits())
			}
		})
	}
}

func TestTLSVerificationNotRetried(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := &Transport{Base: &http.Transport{}} // does not trust the test certificate
	useFakeTime(tr)
	_, err := tr.RoundTrip(post(t, srv.URL, "{}"))
	var cert *tls.CertificateVerificationError
	if !errors.As(err, &cert) {
		t.Fatalf("error %v, want a certificate verification error", err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1: a certificate error is not retried", n)
	}
}

func TestKeyKept(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		tr                          Transport
		header, key                 string // the caller's key, if any
		wantKey, wantLegacy, custom string // headers the server sees; "new" is a key of the Transport's
	}{
		{"own key", Transport{}, "Idempotency-Key", "k-123", "k-123", "", ""},
		{"legacy header", Transport{}, "X-Idempotency-Key", "k-456", "", "k-456", ""},
		{"custom KeyHeader, own key", Transport{KeyHeader: "X-Request-Key"}, "X-Request-Key", "k-789", "", "", "k-789"},
		{"custom KeyHeader, new key", Transport{KeyHeader: "X-Request-Key"}, "", "", "", "", "new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &flaky{fails: 2, fail: status(503)}
			url, base := serve(t, srv)
			tr := tt.tr
			tr.Base = base
			useFakeTime(&tr)
			req := post(t, url, "{}")
			if tt.header != "" {
				req.Header.Set(tt.header, tt.key)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			reqs := srv.Seen()
			if len(reqs) != 3 {
				t.Fatalf("server saw %d requests, want 3", len(reqs))
			}
			custom := tt.custom
			if custom == "new" {
				if _, err := uuid.Parse(reqs[0].customKey); err != nil {
					t.Fatalf("X-Request-Key %q, want a new UUID", reqs[0].customKey)
				}
				custom = reqs[0].customKey
			}
			for i, r := range reqs {
				if r.key != tt.wantKey || r.legacyKey != tt.wantLegacy || r.customKey != custom {
					t.Errorf("attempt %d: Idempotency-Key %q, X-Idempotency-Key %q, X-Request-Key %q; want %q, %q, %q",
						i+1, r.key, r.legacyKey, r.customKey, tt.wantKey, tt.wantLegacy, custom)
				}
			}
		})
	}
}

// errReader fails after its data, as a broken upload would.
type errReader struct{ data io.Reader }

func (r errReader) Read(p []byte) (int, error) {
	n, err := r.data.Read(p)
	if err == io.EOF {
		return n, errors.New("disk gone")
	}
	return n, err
}

// closeCounter counts Close calls of a request body.
type closeCounter struct {
	io.Reader
	closes atomic.Int32
	closed chan struct{} // closed on the first Close, if not nil
}

func (c *closeCounter) Close() error {
	if c.closes.Add(1) == 1 && c.closed != nil {
		close(c.closed)
	}
	return nil
}

// closedOnce waits for c's first Close, which an http.Transport given c as
// a request's body may make after RoundTrip returned (http.RoundTripper's
// contract), and reports whether c was closed exactly once.
func (c *closeCounter) closedOnce() bool {
	select {
	case <-c.closed:
	case <-time.After(10 * time.Second):
	}
	return c.closes.Load() == 1
}

func TestBodyReplayed(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 64)
	tests := []struct {
		name      string
		body      func() (io.ReadCloser, *closeCounter, int64, bool) // body, its closer, ContentLength, set GetBody
		maxBuffer int64
		want      string
		attempts  int
	}{
		{"GetBody", func() (io.ReadCloser, *closeCounter, int64, bool) {
			c := &closeCounter{Reader: strings.NewReader(big), closed: make(chan struct{})}
			return c, c, int64(len(big)), true
		}, 0, big, 3},
		{"GetBody, over MaxBufferBytes: not buffered, retried", func() (io.ReadCloser, *closeCounter, int64, bool) {
			c := &closeCounter{Reader: strings.NewReader(big), closed: make(chan struct{})}
			return c, c, int64(len(big)), true
		}, 10, big, 3},
		{"buffered, length known", func() (io.ReadCloser, *closeCounter, int64, bool) {
			c := &closeCounter{Reader: strings.NewReader(big), closed: make(chan struct{})}
			return c, c, int64(len(big)), false
		}, 0, big, 3},
		{"buffered, length unknown", func() (io.ReadCloser, *closeCounter, int64, bool) {
			c := &closeCounter{Reader: strings.NewReader(big), closed: make(chan struct{})}
			return c, c, -1, false
		}, 0, big, 3},
		{"buffered, exactly MaxBufferBytes", func() (io.ReadCloser, *closeCounter, int64, bool) {
			c := &closeCounter{Reader: strings.NewReader(big), closed: make(chan struct{})}
			return c, c, -1, false
		}, 64, big, 3},
		{"over MaxBufferBytes: sent once", func() (io.ReadCloser, *closeCounter, int64, bool) {
			c := &closeCounter{Reader: strings.NewReader(big), closed: make(chan struct{})}
			return c, c, -1, false
		}, 63, big, 1},
		{"no body", func() (io.ReadCloser, *closeCounter, int64, bool) { return nil, nil, 0, false }, 0, "", 3},
		{"http.NoBody", func() (io.ReadCloser, *closeCounter, int64, bool) { return http.NoBody, nil, 0, true }, 0, "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &flaky{fails: 2, fail: status(503)}
			url, base := serve(t, srv)
			tr := &Transport{Base: base, MaxBufferBytes: tt.maxBuffer}
			useFakeTime(tr)
			req, err := http.NewRequest(http.MethodPut, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, closer, n, getBody := tt.body()
			req.Body, req.ContentLength = body, n
			if getBody {
				req.GetBody = func() (io.ReadCloser, error) {
					if body == http.NoBody {
						return http.NoBody, nil
					}
					return io.NopCloser(strings.NewReader(big)), nil
				}
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			reqs := srv.Seen()
			if len(reqs) != tt.attempts || Attempts(resp) != tt.attempts {
				t.Fatalf("server saw %d requests, Attempts %d; want %d", len(reqs), Attempts(resp), tt.attempts)
			}
			for i, r := range reqs {
				if r.body != tt.want || r.key == "" || r.key != reqs[0].key {
					t.Errorf("attempt %d: body %q key %q; want %q and the first key", i+1, r.body, r.key, tt.want)
				}
			}
			if closer != nil && !closer.closedOnce() {
				t.Errorf("the caller's body was closed %d times, want once", closer.closes.Load())
			}
			if req.Body != body {
				t.Error("the caller's request was changed: another Body")
			}
		})
	}
	t.Run("read error", func(t *testing.T) {
		t.Parallel()
		srv := &flaky{}
		url, base := serve(t, srv)
		tr := &Transport{Base: base}
		c := &closeCounter{Reader: errReader{strings.NewReader("abc")}}
		req, _ := http.NewRequest(http.MethodPost, url, c)
		_, err := tr.RoundTrip(req)
		if err == nil || !strings.Contains(err.Error(), "disk gone") || c.closes.Load() != 1 || len(srv.Seen()) != 0 {
			t.Fatalf("error %v, body closed %d times, %d requests sent; want the read error, 1, 0", err, c.closes.Load(), len(srv.Seen()))
		}
	})
	// A body the caller can give again fails again: its error is no network's.
	t.Run("read error, GetBody", func(t *testing.T) {
		t.Parallel()
		url, base := serve(t, &flaky{})
		cb := &counted{base: base}
		tr := &Transport{Base: cb}
		ft := useFakeTime(tr)
		req, _ := http.NewRequest(http.MethodPost, url, errReader{strings.NewReader("abc")})
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(errReader{strings.NewReader("abc")}), nil }
		_, err := tr.RoundTrip(req)
		if err == nil || !strings.Contains(err.Error(), "disk gone") || cb.n.Load() != 1 || len(ft.Waits()) != 0 {
			t.Fatalf("error %v after %d attempts, waits %v; want the read error after 1, no wait", err, cb.n.Load(), ft.Waits())
		}
	})
}

func TestMethods(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		tr       Transport
		method   string
		attempts int  // requests the server sees
		keyed    bool // with a key
	}{
		{"POST", Transport{}, http.MethodPost, 3, true},
		{"PUT", Transport{}, http.MethodPut, 3, true},
		{"PATCH", Transport{}, http.MethodPatch, 3, true},
		{"DELETE", Transport{}, http.MethodDelete, 3, true},
		{"GET passes through", Transport{}, http.MethodGet, 1, false},
		{"HEAD passes through", Transport{}, http.MethodHead, 1, false},
		{"GET with RetrySafe", Transport{RetrySafe: true}, http.MethodGet, 3, false},
		{"OPTIONS with RetrySafe", Transport{RetrySafe: true}, http.MethodOptions, 3, false},
		{"other method with RetrySafe", Transport{RetrySafe: true}, "PURGE", 1, false},
		{"PUT not in Methods", Transport{Methods: []string{http.MethodPost}}, http.MethodPut, 1, false},
		{"GET in Methods", Transport{Methods: []string{http.MethodGet}}, http.MethodGet, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &flaky{fails: 2, fail: status(503)}
			url, base := serve(t, srv)
			tr := tt.tr
			tr.Base = base
			useFakeTime(&tr)
			req, _ := http.NewRequest(tt.method, url, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			reqs := srv.Seen()
			if len(reqs) != tt.attempts {
				t.Fatalf("server saw %d requests, want %d", len(reqs), tt.attempts)
			}
			if keyed := reqs[0].key != ""; keyed != tt.keyed {
				t.Fatalf("key %q, want one: %v", reqs[0].key, tt.keyed)
			}
			wantAttempts := tt.attempts
			if tt.attempts == 1 {
				wantAttempts = 0 // passed through
			}
			if Attempts(resp) != wantAttempts {
				t.Errorf("Attempts %d, want %d", Attempts(resp), wantAttempts)
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	t.Run("bounds the attempts", func(t *testing.T) {
		t.Parallel()
		srv := &flaky{fails: 100, fail: status(503)}
		url, base := serve(t, srv)
		// Waits of 10 s, 20 s, 40 s on the fake clock; the deadline, 60 s
		// after the first attempt, leaves room for two.
		tr := &Transport{Base: base, MaxAttempts: 10, BaseDelay: 10 * time.Second, MaxDelay: time.Hour}
		ft := useFakeTime(tr)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		deadline, _ := ctx.Deadline()
		ft.now = deadline.Add(-time.Minute) // the real deadline, on the fake clock
		resp, err := tr.RoundTrip(post(t, url, "{}").WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || Attempts(resp) != 3 || len(srv.Seen()) != 3 {
			t.Fatalf("%d after %d attempts (server saw %d), want the third 503", resp.StatusCode, Attempts(resp), len(srv.Seen()))
		}
		if want := []time.Duration{10 * time.Second, 20 * time.Second}; !slices.Equal(ft.Waits(), want) {
			t.Errorf("waits %v, want %v", ft.Waits(), want)
		}
	})
	t.Run("no sleep past it", func(t *testing.T) {
		t.Parallel()
		srv := &flaky{fails: 100, fail: status(503, "Retry-After", "7200")}
		url, base := serve(t, srv)
		// The real clock and sleep: a wait of 2 h would hang the test.
		tr := &Transport{Base: base, MaxDelay: 3 * time.Hour}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		resp, err := tr.RoundTrip(post(t, url, "{}").WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || Attempts(resp) != 1 {
			t.Fatalf("%d after %d attempts, want the first 503", resp.StatusCode, Attempts(resp))
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	t.Run("while waiting", func(t *testing.T) {
		t.Parallel()
		srv := &flaky{fails: 100, fail: status(503)}
		url, base := serve(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		tr := &Transport{Base: base, BaseDelay: time.Hour, MaxDelay: time.Hour}
		tr.sleep = func(ctx context.Context, d time.Duration) error {
			cancel()
			return sleepCtx(ctx, d) // the real sleep: without the cancel it would last 1 h
		}
		_, err := tr.RoundTrip(post(t, url, "{}").WithContext(ctx))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		if n := len(srv.Seen()); n != 1 {
			t.Fatalf("server saw %d requests, want 1", n)
		}
	})
	t.Run("during an attempt", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		var calls atomic.Int32
		url, base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			io.ReadAll(r.Body) //nolint:errcheck // then the server watches the connection
			cancel()
			<-r.Context().Done() // the client went away
		}))
		tr := &Transport{Base: base}
		ft := useFakeTime(tr)
		_, err := tr.RoundTrip(post(t, url, "{}").WithContext(ctx))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		if calls.Load() != 1 || len(ft.Waits()) != 0 {
			t.Fatalf("%d requests, waits %v; want 1 and none", calls.Load(), ft.Waits())
		}
	})
}

func TestReplayed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		replayHeader string // Transport.ReplayHeader
		sent         string // header the server sets to "true"
		want         bool
	}{
		{"default header", "", "X-Idempotency-Replay", true},
		{"not a replay", "", "", false},
		{"custom header", "Idem-Replayed", "Idem-Replayed", true},
		{"default header, custom configured", "Idem-Replayed", "X-Idempotency-Replay", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &flaky{fails: 1, fail: status(409, "Retry-After", "1"), ok: func(w http.ResponseWriter, r *http.Request) {
				if tt.sent != "" {
					w.Header().Set(tt.sent, "true")
				}
				w.WriteHeader(201)
			}}
			url, base := serve(t, srv)
			tr := &Transport{Base: base, ReplayHeader: tt.replayHeader}
			useFakeTime(tr)
			resp, err := tr.RoundTrip(post(t, url, "{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if Replayed(resp) != tt.want || Attempts(resp) != 2 {
				t.Fatalf("Replayed %v, Attempts %d; want %v, 2", Replayed(resp), Attempts(resp), tt.want)
			}
		})
	}
	t.Run("without a Transport", func(t *testing.T) {
		t.Parallel()
		resp := &http.Response{Header: http.Header{"X-Idempotency-Replay": {"true"}}}
		if !Replayed(resp) || Attempts(resp) != 0 || Replayed(nil) || Attempts(nil) != 0 {
			t.Fatal("Replayed or Attempts wrong on a bare response or nil")
		}
	})
}

// noRequest is a Base that returns responses without resp.Request.
type noRequest struct{ code int }

func (b noRequest) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{StatusCode: b.code, Header: http.Header{}, Body: http.NoBody}, nil
}

func TestBaseWithoutResponseRequest(t *testing.T) {
	t.Parallel()
	tr := &Transport{Base: noRequest{503}}
	useFakeTime(tr)
	resp, err := tr.RoundTrip(post(t, "http://127.0.0.1:1/orders", "{}"))
	if err != nil {
		t.Fatal(err)
	}
	if Attempts(resp) != DefaultMaxAttempts || resp.Request.Header.Get("Idempotency-Key") == "" {
		t.Fatalf("Attempts %d, resp.Request %v; want %d and the last attempt", Attempts(resp), resp.Request, DefaultMaxAttempts)
	}
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	invalid := []*Transport{{MaxAttempts: -1}, {BaseDelay: -1}, {MaxDelay: -1}, {MaxBufferBytes: -1},
		{Methods: []string{"post"}}, {Methods: []string{""}}}
	for _, tr := range invalid {
		c := &closeCounter{Reader: strings.NewReader("{}")}
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/", c)
		tr.Base = noRequest{200}
		if _, err := tr.RoundTrip(req); !errors.Is(err, ErrConfig) || c.closes.Load() != 1 {
			t.Errorf("%+v: error %v, body closed %d times; want ErrConfig and closed once", tr, err, c.closes.Load())
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name     string
		tr       Transport
		randN    func(int64) int64
		attempts []int
		want     []time.Duration
	}{
		{"nominal", Transport{}, func(n int64) int64 { return n / 2 }, []int{1, 2, 3, 4}, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms}},
		{"lowest jitter", Transport{}, func(int64) int64 { return 0 }, []int{1, 2, 3}, []time.Duration{75 * ms, 150 * ms, 300 * ms}},
		{"highest jitter", Transport{}, func(n int64) int64 { return n - 1 }, []int{1, 2, 3}, []time.Duration{125*ms - 1, 250*ms - 1, 500*ms - 1}},
		{"capped", Transport{MaxDelay: 300 * ms}, func(n int64) int64 { return n - 1 }, []int{2, 3, 60}, []time.Duration{250*ms - 1, 300 * ms, 300 * ms}},
		{"real jitter in range", Transport{}, nil, []int{1, 1, 1, 1, 1, 1, 1, 1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := tt.tr
			tr.randN = tt.randN
			s, err := tr.settings()
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range tt.attempts {
				got := tr.backoff(a, s)
				if tt.want == nil {
					if got < 75*ms || got >= 125*ms {
						t.Errorf("attempt %d: %v, want within [75ms, 125ms)", a, got)
					}
				} else if got != tt.want[i] {
					t.Errorf("attempt %d: %v, want %v", a, got, tt.want[i])
				}
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-5", 0},
		{"3", 3 * time.Second},
		{"60", time.Minute},
		{"3600", time.Hour},
		{"99999999999", time.Duration(math.MaxInt64/int64(time.Second)) * time.Second}, // no overflow
		{"99999999999999999999", 0}, // out of int64: not a number of seconds
		{start.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{start.Add(-time.Hour).Format(http.TimeFormat), 0},
		{start.Add(time.Hour).Format(http.TimeFormat), time.Hour},
		{"Monday, 02-Jan-30 03:04:15 GMT", 10 * time.Second}, // RFC 850
		{"soon", 0},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.value, start); got != tt.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// keyInFlightType is the type of idem's key-in-flight problem, as
// docs/problems.md documents it.
const keyInFlightType = "https://github.com/idem-go/idem/blob/main/docs/problems.md#key-in-flight"

// A 429 or 503 whose Retry-After is over MaxDelay goes back at once, not
// retried sooner than the server asked (a quota's window, an outage); a key
// in flight or a 500 is retried at MaxDelay.
func TestRetryAfterOverMaxDelayNotRetried(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		fail func(http.ResponseWriter, *http.Request)
		code int
	}{
		{"429", status(429, "Retry-After", "60"), 429},
		{"503", status(503, "Retry-After", "3600"), 503},
		{"429 date", status(429, "Retry-After", start.Add(time.Hour).Format(http.TimeFormat)), 429},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &flaky{fails: 5, fail: tt.fail}
			url, base := serve(t, srv)
			tr := &Transport{Base: base}
			ft := useFakeTime(tr)
			resp, err := tr.RoundTrip(post(t, url, `{"item":"book"}`))
			if err != nil {
				t.Fatal(err)
			}
			readBody(t, resp)
			if resp.StatusCode != tt.code || resp.Header.Get("Retry-After") == "" || len(srv.Seen()) != 1 || len(ft.Waits()) != 0 {
				t.Fatalf("%d Retry-After %q after %d requests and waits %v; want %d at once",
					resp.StatusCode, resp.Header.Get("Retry-After"), len(srv.Seen()), ft.Waits(), tt.code)
			}
		})
	}
}

// closeIdleBase counts CloseIdleConnections calls.
type closeIdleBase struct {
	http.RoundTripper
	closed int
}

func (b *closeIdleBase) CloseIdleConnections() { b.closed++ }

// http.Client.CloseIdleConnections reaches the Transport's Base.
func TestCloseIdleConnections(t *testing.T) {
	base := &closeIdleBase{RoundTripper: http.DefaultTransport}
	c := &http.Client{Transport: &Transport{Base: base}}
	c.CloseIdleConnections()
	if base.closed != 1 {
		t.Fatalf("Base.CloseIdleConnections called %d times, want 1", base.closed)
	}
	(&Transport{Base: &tracked{base: http.DefaultTransport}}).CloseIdleConnections() // a Base without the method: nothing to do
}

// counted counts the attempts it sends on through base.
type counted struct {
	base http.RoundTripper
	n    atomic.Int32
}

func (c *counted) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

// A request net/http refuses to send, whatever the network, is not retried.
func TestRefusedNotRetried(t *testing.T) {
	t.Parallel()
	url, base := serve(t, &flaky{})
	for name, req := range map[string]func() *http.Request{
		"unsupported scheme": func() *http.Request { return post(t, "ftp"+strings.TrimPrefix(url, "http"), "{}") },
		"invalid header":     func() *http.Request { r := post(t, url, "{}"); r.Header.Set("X-Note", "a\nb"); return r },
		"invalid method":     func() *http.Request { r := post(t, url, "{}"); r.Method = "PO ST"; return r },
		"no host":            func() *http.Request { return post(t, "http:///orders", "{}") },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cb := &counted{base: base}
			tr := &Transport{Base: cb, Methods: []string{http.MethodPost, "PO ST"}}
			ft := useFakeTime(tr)
			_, err := tr.RoundTrip(req())
			if err == nil || cb.n.Load() != 1 || len(ft.Waits()) != 0 {
				t.Fatalf("error %v after %d attempts, waits %v; want an error after 1, no wait", err, cb.n.Load(), ft.Waits())
			}
		})
	}
}
