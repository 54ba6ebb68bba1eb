package idemtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// Smuggle checks that a server leaves no refused request body on the
// connection to be read as the next request. On a new connection to the
// server at baseURL ("http://host:port") it writes, at once, a POST to path
// with an idempotency key and a body declared as declared bytes (0: all it
// sends): offset filler bytes (what a server reads before its handlers run:
// 8 KiB for fasthttp), then a complete second POST to path with key
// SmuggledKey and body body. It returns the status of the first response,
// then sends a GET that no route serves and returns the status of every
// further response up to the 404 that answers it, or until the server
// closes the connection. Any other status is the smuggled request's: the
// server parsed the refused body as a request.
func Smuggle(t testing.TB, baseURL, path, body string, offset, declared int) (first int, more []int) {
	t.Helper()
	u, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	smuggled := strings.Repeat(" ", offset) + fmt.Sprintf(
		"POST %s HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, u.Host, SmuggledKey, len(body), body)
	if declared == 0 {
		declared = len(smuggled)
	}
	if declared < len(smuggled) {
		t.Fatalf("Smuggle: declared %d bytes, less than the %d it sends", declared, len(smuggled))
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A bound for a server that neither answers nor closes, so that the
	// test fails instead of hanging; no pass depends on it.
	conn.SetDeadline(time.Now().Add(time.Minute)) //nolint:errcheck // a fresh connection
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s-outer\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		path, u.Host, SmuggledKey, declared)
	if _, err := io.WriteString(conn, head+smuggled); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("Smuggle: first response: %v", err)
	}
	drain(resp)
	first = resp.StatusCode
	if resp.Close {
		return first, nil
	}
	// The server kept the connection: a probe shows what it reads next.
	probe := fmt.Sprintf("GET /idemtest-smuggle-probe HTTP/1.1\r\nHost: %s\r\n\r\n", u.Host)
	if _, err := io.WriteString(conn, probe); err != nil {
		return first, nil // closed after all
	}
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
				return first, more
			}
			t.Fatalf("Smuggle: reading after the first response: %v", err)
		}
		drain(resp)
		if resp.StatusCode == http.StatusNotFound {
			return first, more
		}
		more = append(more, resp.StatusCode)
	}
}

// SmuggledKey is the idempotency key of the request that Smuggle hides in
// a body.
const SmuggledKey = "idemtest-smuggled"

func drain(resp *http.Response) {
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // only the status matters
	resp.Body.Close()
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// TestSmuggling runs Smuggle on the requests an Engine refuses before it
// has read their body whole (over MaxBodyBytes, a bad key; bodies sent
// whole or declared larger than sent): each gets its 413 or 400 and no
// request inside its body runs. serve starts a server for cfg whose
// POST /orders goes through the adapter to a handler that calls run, and
// returns its base URL; offset is as for Smuggle.
func TestSmuggling(t *testing.T, offset int, serve func(t *testing.T, cfg core.Config, run func()) string) {
	refuseOuter := func(key string) error {
		if strings.HasSuffix(key, "-outer") { // Smuggle's outer request
			return errors.New("refused")
		}
		return nil
	}
	for _, tc := range []struct {
		name     string
		cfg      core.Config
		declared int // 0: all sent
		status   int
	}{
		{"over MaxBodyBytes, all sent", core.Config{MaxBodyBytes: 64}, 0, http.StatusRequestEntityTooLarge},
		{"over MaxBodyBytes, 2 MiB declared", core.Config{MaxBodyBytes: 64}, 2 << 20, http.StatusRequestEntityTooLarge},
		{"5 MiB declared", core.Config{}, 5 << 20, http.StatusRequestEntityTooLarge},
		{"a bad key, all sent", core.Config{ValidateKey: refuseOuter}, 0, http.StatusBadRequest},
		{"a bad key, 2 MiB declared", core.Config{ValidateKey: refuseOuter}, 2 << 20, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			url := serve(t, tc.cfg, func() { runs.Add(1) })
			first, more := Smuggle(t, url, "/orders", `{"item":"book","qty":1}`, offset, tc.declared)
			if first != tc.status || len(more) != 0 || runs.Load() != 0 {
				t.Fatalf("first response %d, then %v, %d runs; want %d, nothing more, no run", first, more, runs.Load(), tc.status)
			}
		})
	}
}

// TestTruncatedBody checks that a request whose body ends before its
// Content-Length (the client went away mid-upload) never runs and stores
// nothing: the same request sent whole with the same key then runs once
// and gets 201. serve is as for TestSmuggling, its handler answering 201.
// Bodies are cut within what a server reads before its handlers and past
// it (fasthttp's 8 KiB, Fiber's StreamRequestBody), with and without a
// Content-Encoding (the length declared is the encoded body's), and chunked
// bodies cut at a chunk boundary, before the last (empty) chunk.
func TestTruncatedBody(t *testing.T, serve func(t *testing.T, cfg core.Config, run func()) string) {
	for _, tc := range []struct {
		name       string
		size, sent int
		encoding   string
		chunked    bool
	}{
		{"small body", 100, 40, "", false},
		{"streamed body", 64 << 10, 20 << 10, "", false},
		// Labelled gzip, sent as is: a cut is told by its length, whatever
		// the encoding, and the handlers here never decode it.
		{"small gzip body", 100, 40, "gzip", false},
		{"streamed gzip body", 64 << 10, 20 << 10, "gzip", false},
		{"small chunked body", 100, 40, "", true},
		{"streamed chunked body", 64 << 10, 20 << 10, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			base := serve(t, core.Config{}, func() { runs.Add(1) })
			body := `{"item":"book","qty":1,"pad":"` + strings.Repeat("x", tc.size-len(`{"item":"book","qty":1,"pad":""}`)) + `"}`
			key := fmt.Sprintf("idemtest-truncated-%d-%s-%t", tc.size, tc.encoding, tc.chunked)
			encoding := ""
			if tc.encoding != "" {
				encoding = "Content-Encoding: " + tc.encoding + "\r\n"
			}
			u, err := url.Parse(base)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(time.Minute)) //nolint:errcheck // a bound for a server that hangs; no pass depends on it
			framing, sent := fmt.Sprintf("Content-Length: %d", len(body)), body[:tc.sent]
			if tc.chunked {
				framing, sent = "Transfer-Encoding: chunked", chunks(sent, 4<<10)
			}
			head := fmt.Sprintf("POST /orders HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\nContent-Type: application/json\r\n%s%s\r\n\r\n",
				u.Host, key, encoding, framing)
			if _, err := io.WriteString(conn, head+sent); err != nil {
				t.Fatal(err)
			}
			conn.(*net.TCPConn).CloseWrite() //nolint:errcheck // the client is done sending
			// The server answers 400 or closes the connection; either way the
			// handler must not have run.
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				drain(resp)
				if resp.StatusCode < 400 {
					t.Fatalf("a body cut after %d of %d bytes: %d", tc.sent, len(body), resp.StatusCode)
				}
			}
			if n := runs.Load(); n != 0 {
				t.Fatalf("the handler ran %d times on a body cut after %d of %d bytes", n, tc.sent, len(body))
			}
			req, err := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "application/json")
			if tc.encoding != "" {
				req.Header.Set("Content-Encoding", tc.encoding)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
			if resp.StatusCode != http.StatusCreated || runs.Load() != 1 {
				t.Fatalf("the whole body's retry: %d after %d runs, want 201 after 1", resp.StatusCode, runs.Load())
			}
		})
	}
}

// chunks frames s as chunks of at most size bytes, without the last
// (empty) chunk that would end the body.
func chunks(s string, size int) string {
	var b strings.Builder
	for len(s) > 0 {
		n := min(size, len(s))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, s[:n])
		s = s[n:]
	}
	return b.String()
}

// TestRefusedLargeBody checks that a client still sending a large body
// reads the answer to it when the Engine refuses the request before
// reading the body whole: 1 MiB over a MaxBodyBytes of 64 KiB (413), or
// 512 KiB with a bad key (400). It sends such requests with net/http's client,
// which reads the response while it writes the body, and fails on a
// connection reset instead of the answer: a server that closes a
// connection with the body unread loses the answer it sent. serve is as
// for TestSmuggling.
func TestRefusedLargeBody(t *testing.T, serve func(t *testing.T, cfg core.Config, run func()) string) {
	refuse := func(key string) error {
		if strings.HasPrefix(key, "idemtest-bad-") {
			return errors.New("refused")
		}
		return nil
	}
	var runs atomic.Int64
	base := serve(t, core.Config{MaxBodyBytes: 64 << 10, ValidateKey: refuse}, func() { runs.Add(1) })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: time.Minute} // a bound for a server that hangs; no pass depends on it
	pad := func(n int) string { return `{"item":"book","qty":1,"pad":"` + strings.Repeat("x", n) + `"}` }
	for _, tc := range []struct {
		name, key, body string
		status          int
	}{
		{"over MaxBodyBytes", "large", pad(1 << 20), http.StatusRequestEntityTooLarge},
		{"a bad key", "bad", pad(512 << 10), http.StatusBadRequest},
	} {
		for i := range 30 { // a reset comes or not by the timing of the close: many tries catch it
			req, err := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Idempotency-Key", fmt.Sprintf("idemtest-%s-%d", tc.key, i))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s, request %d: %v, want a %d", tc.name, i, err, tc.status)
			}
			drain(resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s, request %d: %d, want %d", tc.name, i, resp.StatusCode, tc.status)
			}
		}
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times", n)
	}
}
