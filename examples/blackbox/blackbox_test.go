// Package blackbox drives every example server from outside, as a client
// would, per the examples contract of DESIGN.md: it builds each server,
// starts it on a loopback port and checks replays, conflicts, bad keys,
// concurrency and the served OpenAPI spec. The integration variant
// (-tags integration) runs three instances of each on one real Redis, and
// two on one PostgreSQL database.
package blackbox

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// frameworks are the example servers, one folder each under examples/.
var frameworks = []string{"nethttp", "gin", "echo", "echov5", "fiber", "fiberv3"}

// build compiles examples/<name> into a temporary binary.
func build(t *testing.T, name string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join("..", name)); err != nil {
		t.Skipf("examples/%s does not exist", name)
	}
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

// server is a running example process.
type server struct {
	url    string
	client *http.Client
	t      *testing.T
	cmd    *exec.Cmd
}

// start runs bin on a free loopback port with the extra environment and
// stops it when the test ends.
func start(t *testing.T, bin string, env ...string) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "ADDR="+addr), env...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill() //nolint:errcheck
			<-done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(bin), logs.String())
		}
	})
	s := &server{url: "http://" + addr, t: t, cmd: cmd, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := s.client.Get(s.url + "/orders"); err == nil {
			resp.Body.Close()
			return s
		}
		select {
		case <-done:
			t.Fatalf("%s exited at start:\n%s", bin, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 30s", bin)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (s *server) post(user, key, body string) result {
	s.t.Helper()
	return s.send(http.MethodPost, "/orders", user, key, body)
}

func (s *server) send(method, path, user, key, body string) result {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-ID", user)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return s.do(req)
}

func (s *server) do(req *http.Request) result {
	s.t.Helper()
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
		return result{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: b}
}

// wantUnparsed sends a request with a control byte in a header, which the
// server refuses (400) before any handler, as a key with one: its answer
// must not quote the request, whose headers may be a proxy's (fasthttp's
// message does, unless Server.SecureErrorLogMessage is set).
func (s *server) wantUnparsed(body string) {
	s.t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), 5*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // a net.Conn's
	const secret = "proxy-secret-4711"
	fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-User-ID: alice\r\n"+
		"X-Internal-Auth: %s\r\nIdempotency-Key: k\x01\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		secret, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		s.t.Fatalf("control byte in a header: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || bytes.Contains(b, []byte(secret)) {
		s.t.Errorf("control byte in a header: %d %q, want 400 without the request's headers", resp.StatusCode, b)
	}
}

func (s *server) count() int {
	s.t.Helper()
	r := s.do(mustRequest(http.MethodGet, s.url+"/orders"))
	var l struct {
		Count  int               `json:"count"`
		Orders []json.RawMessage `json:"orders"`
	}
	if err := json.Unmarshal(r.body, &l); err != nil || r.status != http.StatusOK || l.Count != len(l.Orders) {
		s.t.Fatalf("GET /orders = %d %s (%v)", r.status, r.body, err)
	}
	return l.Count
}

func mustRequest(method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		panic(err)
	}
	return req
}

var keySeq struct {
	sync.Mutex
	n int
}

// newKey returns a key no earlier run used (the Redis store outlives runs).
func newKey(t *testing.T) string {
	keySeq.Lock()
	defer keySeq.Unlock()
	keySeq.n++
	return fmt.Sprintf("bb-%s-%d-%d", t.Name(), time.Now().UnixNano(), keySeq.n)
}

// duplicates sends two requests of user with key and body at once, and
// returns their results in the order they come: with a handler slower than
// the gap between them, the second to arrive gets a 409 while the first
// runs, and comes first.
func duplicates(post func(user, key, body string) result, user, key, body string) <-chan result {
	results := make(chan result, 2)
	for range 2 {
		go func() { results <- post(user, key, body) }()
	}
	return results
}

func wantStatus(t *testing.T, what string, r result, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.status, status, r.body)
	}
}

func wantProblem(t *testing.T, what string, r result, status int, typ string) {
	t.Helper()
	wantStatus(t, what, r, status)
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if err := json.Unmarshal(r.body, &p); err != nil || !strings.HasSuffix(p.Type, "#"+typ) || p.Status != status {
		t.Fatalf("%s: problem %s, want type #%s", what, r.body, typ)
	}
}

func wantReplay(t *testing.T, what string, got, first result) {
	t.Helper()
	if got.status != first.status || !bytes.Equal(got.body, first.body) || got.header.Get("X-Idempotency-Replay") != "true" {
		t.Fatalf("%s: got %d %s (replay=%q), want the replay of %d %s", what, got.status, got.body,
			got.header.Get("X-Idempotency-Replay"), first.status, first.body)
	}
	for _, h := range []string{"Location", "Content-Type"} {
		if got.header.Get(h) != first.header.Get(h) {
			t.Fatalf("%s: replayed %s %q, want %q", what, h, got.header.Get(h), first.header.Get(h))
		}
	}
}

func TestExamples(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			s := start(t, build(t, fw))
			testContract(t, s)
			testBodies(t, s)
			testSpec(t, s)
		})
	}
}

// On SIGTERM every example finishes the requests in flight before it
// exits: a request cut off half-way would leave its key locked.
func TestExamplesGracefulShutdown(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			s := start(t, build(t, fw))
			// The 409 of one of two duplicates says the other is inside
			// its handler: that is when the signal goes.
			results := duplicates(s.post, "dave", newKey(t), `{"item": "clock", "qty": 1, "delay_ms": 800}`)
			wantProblem(t, "the duplicate answered first", <-results, http.StatusConflict, "key-in-flight")
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, "request in flight during shutdown", <-results, http.StatusCreated)
		})
	}
}

// testContract checks the examples contract on one server.
func testContract(t *testing.T, s *server) {
	before := s.count()
	order := `{"item": "book", "qty": 2}`

	key := newKey(t)
	first := s.post("alice", key, order)
	wantStatus(t, "first request", first, http.StatusCreated)
	var o struct {
		ID   string `json:"id"`
		Item string `json:"item"`
		Qty  int    `json:"qty"`
	}
	if err := json.Unmarshal(first.body, &o); err != nil || o.ID == "" || o.Item != "book" || o.Qty != 2 {
		t.Fatalf("first body %s: %v", first.body, err)
	}
	if loc := first.header.Get("Location"); loc != "/orders/"+o.ID {
		t.Fatalf("Location %q, want /orders/%s", loc, o.ID)
	}
	if first.header.Get("X-Idempotency-Replay") != "" {
		t.Fatal("the first response is marked as a replay")
	}
	wantReplay(t, "retry", s.post("alice", key, order), first)
	wantReplay(t, "retry with reordered JSON", s.post("alice", key, `{"qty":2,"item":"book"}`), first)
	wantProblem(t, "changed body", s.post("alice", key, `{"item": "book", "qty": 3}`), http.StatusUnprocessableEntity, "key-reused")

	// Scope: bob's key is his own.
	bob := s.post("bob", key, order)
	wantStatus(t, "other user", bob, http.StatusCreated)
	if bob.header.Get("X-Idempotency-Replay") != "" || bytes.Equal(bob.body, first.body) {
		t.Fatalf("bob got alice's order: %s", bob.body)
	}

	// Bad keys.
	wantProblem(t, "300-character key", s.post("alice", strings.Repeat("k", 300), order), http.StatusBadRequest, "invalid-key")
	wantProblem(t, "non-ASCII key", s.post("alice", "clé-"+newKey(t), order), http.StatusBadRequest, "invalid-key")
	s.wantUnparsed(order)

	// A wrong URL or method gets the framework's 404 or 405, whatever the
	// key: the request never was the handler's, and the key stays alice's.
	for _, stray := range []struct {
		method, path string
		status       int
	}{
		{http.MethodPost, "/nowhere", http.StatusNotFound},
		{http.MethodPost, "/ORDERS", http.StatusNotFound},
		{http.MethodPost, "/orders/", http.StatusNotFound},
		{http.MethodPut, "/orders", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/orders", http.StatusMethodNotAllowed},
	} {
		for _, k := range []string{key, strings.Repeat("k", 300)} {
			r := s.send(stray.method, stray.path, "alice", k, order)
			wantStatus(t, stray.method+" "+stray.path, r, stray.status)
			// The framework's answer, not a failure of the order service.
			if bytes.Contains(r.body, []byte(`"internal error"`)) {
				t.Errorf("%s %s: body %s, want the framework's %d", stray.method, stray.path, r.body, stray.status)
			}
		}
	}
	wantReplay(t, "retry after requests to wrong URLs", s.post("alice", key, order), first)

	// The handler's own 400s are stored and replayed.
	for name, body := range map[string]string{
		"qty 0":         `{"item": "book", "qty": 0}`,
		"broken JSON":   `{"item": `,
		"trailing data": `{"item": "book", "qty": 1}xyz`,
	} {
		k := newKey(t)
		r := s.post("alice", k, body)
		wantStatus(t, name, r, http.StatusBadRequest)
		if strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
			t.Fatalf("%s: the handler's 400 looks like idem's: %s", name, r.body)
		}
		wantReplay(t, name+" replayed", s.post("alice", k, body), r)
	}

	// 500 is not stored: the retry runs again.
	k := newKey(t)
	boom := `{"item": "boom", "qty": 1}`
	wantStatus(t, "boom", s.post("alice", k, boom), http.StatusInternalServerError)
	if r := s.post("alice", k, boom); r.status != http.StatusInternalServerError || r.header.Get("X-Idempotency-Replay") != "" {
		t.Fatalf("boom retry: %d replay=%q, want a fresh 500", r.status, r.header.Get("X-Idempotency-Replay"))
	}

	// In flight: 409 with Retry-After, then the replay. Of two duplicates
	// sent together, whichever comes second finds the other inside its
	// 700 ms handler.
	k = newKey(t)
	slow := `{"item": "pen", "qty": 1, "delay_ms": 700}`
	pair := duplicates(s.post, "alice", k, slow)
	conflict := <-pair
	wantProblem(t, "in flight", conflict, http.StatusConflict, "key-in-flight")
	if conflict.header.Get("Retry-After") == "" {
		t.Fatal("409 without Retry-After")
	}
	slowFirst := <-pair
	wantStatus(t, "slow first", slowFirst, http.StatusCreated)
	wantReplay(t, "after the slow first", s.post("alice", k, slow), slowFirst)

	// Concurrent duplicates: one order.
	k = newKey(t)
	results := concurrently(t, []*server{s}, 50, k, `{"item": "cup", "qty": 1, "delay_ms": 100}`)
	checkDuplicates(t, results)

	// Without a key nothing is protected: two orders.
	wantStatus(t, "no key", s.post("alice", "", order), http.StatusCreated)
	wantStatus(t, "no key again", s.post("alice", "", order), http.StatusCreated)

	if got := s.count() - before; got != 6 {
		t.Fatalf("%d orders created, want 6 (alice's book, bob's book, the pen, the cup, two without a key)", got)
	}
}

// testBodies: a handler reads at most 1 MiB of a body, with a key or
// without, and reads it as received: a compressed body is not inflated.
func testBodies(t *testing.T, s *server) {
	before := s.count()
	large := `{"item": "pen", "qty": 1, "note": "` + strings.Repeat("x", 1<<20) + `"}`
	wantProblem(t, "a keyed body over 1 MiB", s.post("dave", newKey(t), large), http.StatusRequestEntityTooLarge, "body-too-large")
	r := s.post("dave", "", large)
	wantStatus(t, "a body over 1 MiB without a key", r, http.StatusRequestEntityTooLarge)
	if strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
		t.Fatalf("the handler's 413 looks like idem's: %s", r.body)
	}

	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte(`{"item": "book", "qty": 1}`)) //nolint:errcheck // a bytes.Buffer
	w.Close()                                     //nolint:errcheck
	req, _ := http.NewRequest(http.MethodPost, s.url+"/orders", &gz)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	wantStatus(t, "a gzip body", s.do(req), http.StatusBadRequest)

	if n := s.count(); n != before {
		t.Fatalf("%d orders created, want none", n-before)
	}
}

// concurrently sends n duplicates at once, spread over the servers.
func concurrently(t *testing.T, servers []*server, n int, key, body string) []result {
	results := make([]result, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			results[i] = servers[i%len(servers)].post("carol", key, body)
		}()
	}
	close(gate)
	wg.Wait()
	return results
}

// checkDuplicates: exactly one first 201; every other response is a 409 or
// the byte-identical replay of it.
func checkDuplicates(t *testing.T, results []result) {
	t.Helper()
	var first *result
	for i, r := range results {
		if r.status == http.StatusCreated && r.header.Get("X-Idempotency-Replay") == "" {
			if first != nil {
				t.Fatalf("two first responses: %s and %s", first.body, r.body)
			}
			first = &results[i]
		}
	}
	if first == nil {
		t.Fatal("no first response among the duplicates")
	}
	for _, r := range results {
		switch {
		case r.status == http.StatusConflict:
		case r.header.Get("X-Idempotency-Replay") == "true":
			if r.status != first.status || !bytes.Equal(r.body, first.body) {
				t.Fatalf("replay %d %s differs from the first %d %s", r.status, r.body, first.status, first.body)
			}
		case r.status != http.StatusCreated:
			t.Fatalf("unexpected %d %s", r.status, r.body)
		}
	}
}

// testSpec checks the served OpenAPI document: POST /orders documents the
// Idempotency-Key header, GET /orders does not, and it has no empty host
// (which Swagger 2.0 validators refuse).
func testSpec(t *testing.T, s *server) {
	r := s.do(mustRequest(http.MethodGet, s.url+"/swagger/doc.json"))
	wantStatus(t, "GET /swagger/doc.json", r, http.StatusOK)
	var doc struct {
		Host  *string `json:"host"`
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("spec is not JSON: %v\n%s", err, r.body)
	}
	if doc.Host != nil && *doc.Host == "" {
		t.Fatal(`the spec has "host": "", which Swagger 2.0 does not allow`)
	}
	has := func(method string) bool {
		for _, p := range doc.Paths["/orders"][method].Parameters {
			if p.In == "header" && strings.EqualFold(p.Name, "Idempotency-Key") {
				return true
			}
		}
		return false
	}
	if !has("post") {
		t.Fatalf("POST /orders does not document Idempotency-Key:\n%s", r.body)
	}
	if has("get") {
		t.Fatal("GET /orders documents Idempotency-Key")
	}
	responses := doc.Paths["/orders"]["post"].Responses
	for _, code := range []string{"400", "409", "413", "422"} {
		if _, ok := responses[code]; !ok {
			t.Fatalf("POST /orders does not document %s", code)
		}
	}
	// The responses a retry may get replayed (the 201, the handler's own
	// 400) carry the replay header.
	for _, code := range []string{"201", "400"} {
		if !bytes.Contains(responses[code], []byte(`"X-Idempotency-Replay"`)) {
			t.Fatalf("POST /orders %s does not document X-Idempotency-Replay: %s", code, responses[code])
		}
	}
}
