// Command demo drives an example server as a client would and prints a
// readable transcript: a first request, its replay, a changed body (422),
// a bad key (400), a failing handler (500, not stored), 30 concurrent
// duplicates that create one order, then the same through the retrying
// client idemclient: a lost response replayed, and 30 duplicates that each
// end with the order. It exits 1 if the server does not behave so.
//
//	demo -exec ./bin/server-gin     # start the server on a free port, drive it, stop it
//	demo -url http://127.0.0.1:8080 # drive a running server
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idem-go/idem/idemclient"
)

func main() { os.Exit(run()) }

func run() int {
	execPath := flag.String("exec", "", "server binary to start on a free port and stop afterwards")
	baseURL := flag.String("url", "http://127.0.0.1:8080", "base URL of a running server (without -exec)")
	flag.Parse()
	if *execPath != "" {
		stop, url, err := start(*execPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			return 1
		}
		defer stop()
		*baseURL = url
	}
	base := &http.Transport{MaxIdleConnsPerHost: 64}
	d := &demo{
		url:      *baseURL,
		client:   &http.Client{Timeout: 30 * time.Second, Transport: base},
		retrying: &http.Client{Timeout: 30 * time.Second, Transport: &idemclient.Transport{Base: base}},
		base:     base,
	}
	if err := d.waitReady(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	d.run()
	if d.failed {
		fmt.Println("\nFAIL: the server did not behave as the contract says")
		return 1
	}
	fmt.Println("\nOK: every step behaved as the contract says")
	return 0
}

// start runs the server binary on a free loopback port.
func start(path string) (stop func(), url string, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), "ADDR="+addr)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill() //nolint:errcheck
			<-done
		}
		if os.Getenv("DEMO_SERVER_LOG") != "" {
			fmt.Printf("\n--- server log ---\n%s", logs.String())
		}
	}
	fmt.Printf("started %s on %s\n", path, addr)
	return stop, "http://" + addr, nil
}

type demo struct {
	url      string
	client   *http.Client // plain: shows each answer of the server
	retrying *http.Client // idemclient.Transport over base
	base     http.RoundTripper
	failed   bool
}

type result struct {
	status   int
	header   http.Header
	body     string
	key      string // the Idempotency-Key sent
	attempts int    // sent by idemclient
	replayed bool
}

func (d *demo) waitReady() error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := d.client.Get(d.url + "/orders"); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("server at %s not ready after 30s", d.url)
}

func (d *demo) post(key, user, body string) result { return d.send(d.client, key, user, body) }

func (d *demo) send(client *http.Client, key, user, body string) result {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, d.url+"/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-ID", user)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return result{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: strings.TrimSpace(string(b)),
		key: resp.Request.Header.Get("Idempotency-Key"), attempts: idemclient.Attempts(resp), replayed: idemclient.Replayed(resp)}
}

// loseFirst loses the response to its first request on the way back, as a
// timeout or a dropped connection would: the server handled the request.
type loseFirst struct {
	base http.RoundTripper
	lost string // the lost body
}

func (l *loseFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err != nil || l.lost != "" {
		return resp, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	l.lost = strings.TrimSpace(string(b))
	return nil, errors.New("connection reset by peer")
}

func (d *demo) count() int {
	resp, err := d.client.Get(d.url + "/orders")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var l struct{ Count int }
	json.NewDecoder(resp.Body).Decode(&l) //nolint:errcheck
	return l.Count
}

func (d *demo) check(ok bool, what string) {
	mark := "ok  "
	if !ok {
		mark, d.failed = "FAIL", true
	}
	fmt.Printf("  [%s] %s\n", mark, what)
}

func show(r result) {
	fmt.Printf("  <- %d %s", r.status, http.StatusText(r.status))
	for _, h := range []string{"Location", "X-Idempotency-Replay", "Retry-After", "Content-Type"} {
		if v := r.header.Get(h); v != "" {
			fmt.Printf("  %s: %s", h, v)
		}
	}
	fmt.Printf("\n     %s\n", r.body)
}

func newKey() string {
	var b [16]byte
	rand.Read(b[:]) //nolint:errcheck
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func (d *demo) run() {
	user := "alice"
	key := newKey()
	before := d.count()
	order := `{"item": "book", "qty": 2}`

	fmt.Printf("\n1. First request: POST /orders, Idempotency-Key: %s\n", key)
	first := d.post(key, user, order)
	show(first)
	d.check(first.status == http.StatusCreated && first.header.Get("X-Idempotency-Replay") == "", "201 Created, the handler ran")

	fmt.Println("\n2. The client retries with the same key (a lost response, a timeout)")
	replay := d.post(key, user, order)
	show(replay)
	d.check(replay.status == http.StatusCreated && replay.body == first.body && replay.header.Get("X-Idempotency-Replay") == "true",
		"the same 201 and body, replayed (X-Idempotency-Replay: true), no second order")

	fmt.Println("\n3. The same key with a different body (qty 3)")
	changed := d.post(key, user, `{"item": "book", "qty": 3}`)
	show(changed)
	d.check(changed.status == http.StatusUnprocessableEntity, "422: a key is bound to one request")

	fmt.Println("\n4. The same key from another user")
	bob := d.post(key, "bob", order)
	show(bob)
	d.check(bob.status == http.StatusCreated && bob.header.Get("X-Idempotency-Replay") == "", "201: keys are scoped per user, bob's order is his own")

	fmt.Println("\n5. A malformed key (300 characters)")
	orders := d.count()
	bad := d.post(strings.Repeat("k", 300), user, order)
	show(bad)
	d.check(bad.status == http.StatusBadRequest && strings.HasPrefix(bad.header.Get("Content-Type"), "application/problem+json") &&
		d.count() == orders, "400 problem+json, the handler did not run")

	fmt.Println("\n6. The handler fails (item \"boom\"): 500 is not stored, a retry runs again")
	boomKey := newKey()
	boom1 := d.post(boomKey, user, `{"item": "boom", "qty": 1}`)
	boom2 := d.post(boomKey, user, `{"item": "boom", "qty": 1}`)
	show(boom2)
	d.check(boom1.status == http.StatusInternalServerError && boom2.status == http.StatusInternalServerError &&
		boom2.header.Get("X-Idempotency-Replay") == "", "both 500, neither replayed")

	fmt.Println("\n7. 30 concurrent duplicates of a slow request (delay_ms 300)")
	dupKey := newKey()
	const n = 30
	counts, created := d.duplicates(d.client, n, dupKey, user, `{"item": "pen", "qty": 1, "delay_ms": 300}`)
	fmt.Printf("  <- %v\n", counts)
	d.check(counts["201 first"] == 1 && counts["201 first"]+counts["201 replay"]+counts["409 in flight"] == n,
		"one 201 from the handler, every other a 409 (Retry-After) or the replay")
	after := d.post(dupKey, user, `{"item": "pen", "qty": 1, "delay_ms": 300}`)
	d.check(after.body == created && after.header.Get("X-Idempotency-Replay") == "true", "a retry after the first finished gets the replay")

	fmt.Println("\n8. The retrying client (idemclient.Transport), no key given; the first response is lost on its way back")
	lost := &loseFirst{base: d.base}
	lossy := &http.Client{Timeout: 30 * time.Second, Transport: &idemclient.Transport{Base: lost}}
	mug := d.send(lossy, "", user, `{"item": "mug", "qty": 1}`)
	show(mug)
	fmt.Printf("     Idempotency-Key: %s (made by the client), %d attempts\n", mug.key, mug.attempts)
	d.check(mug.status == http.StatusCreated && mug.replayed && mug.attempts == 2 && mug.body == lost.lost,
		"the second attempt, with the same key, gets the lost 201 replayed: one order")

	fmt.Println("\n9. 30 concurrent duplicates through the retrying client: each 409 is sent again after its Retry-After")
	counts, _ = d.duplicates(d.retrying, n, newKey(), user, `{"item": "cup", "qty": 1, "delay_ms": 300}`)
	fmt.Printf("  <- %v\n", counts)
	d.check(counts["201 first"] == 1 && counts["201 replay"] == n-1, "one 201 from the handler, every other the replay")

	fmt.Println("\n10. GET /orders: what was really created")
	got := d.count() - before
	fmt.Printf("  <- %d new orders\n", got)
	d.check(got == 5, "5 orders: alice's book, bob's book, one pen, one mug, one cup; no duplicates")
}

// duplicates sends n copies of one request with one key at once and counts
// the answers; created is the body of the one the handler made.
func (d *demo) duplicates(client *http.Client, n int, key, user, body string) (counts map[string]int, created string) {
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = d.send(client, key, user, body)
		}()
	}
	wg.Wait()
	counts = map[string]int{}
	for _, r := range results {
		switch {
		case r.status == http.StatusCreated && r.header.Get("X-Idempotency-Replay") == "":
			counts["201 first"]++
			created = r.body
		case r.status == http.StatusCreated:
			counts["201 replay"]++
		case r.status == http.StatusConflict && r.header.Get("Retry-After") != "":
			counts["409 in flight"]++
		default:
			counts[fmt.Sprintf("%d other", r.status)]++
		}
	}
	return counts, created
}
