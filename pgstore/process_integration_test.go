//go:build integration

package pgstore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// processSetup migrates a schema of the test's own, with a table of side
// effects (one row per run of the handler), and builds internal/testserver.
func processSetup(t *testing.T) (pool *pgxpool.Pool, schema, effects, bin string) {
	t.Helper()
	ctx := context.Background()
	pool, schema = pgtest.Pool(t)
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	effects = pgx.Identifier{schema, "side_effects"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+effects+" (id bigserial PRIMARY KEY, key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(t.TempDir(), "testserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./internal/testserver").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return pool, schema, effects, bin
}

// burstTimeout is the test servers' StoreTimeout under a burst of
// duplicates: each waits for one of the pool's few connections, which on a
// busy machine may take longer than the default second (a 503, fail-closed).
const burstTimeout = 20 * time.Second

// TestIntegrationExactlyOnceAcrossProcesses runs three API processes on
// one PostgreSQL and sends each of 50 keys 20 times at once, spread over
// the three: the handler's side effect (a row) happens exactly once per key.
func TestIntegrationExactlyOnceAcrossProcesses(t *testing.T) {
	const keys, dups = 50, 20
	ctx := context.Background()
	pool, schema, effects, bin := processSetup(t)
	var urls []string
	for i := range 3 {
		urls = append(urls, startTestServer(t, bin, "-store-timeout", burstTimeout.String(), "-database", pgtest.URL(), "-schema", schema,
			"-name", "s"+strconv.Itoa(i)))
	}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: keys * dups}}
	t.Cleanup(client.CloseIdleConnections)
	type result struct {
		status int
		replay bool
		body   []byte
		err    error
	}
	post := func(url, key string) result {
		req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"item":"book","qty":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return result{err: err}
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return result{status: resp.StatusCode, replay: resp.Header.Get(core.HeaderReplay) == "true", body: body, err: err}
	}
	key := func(k int) string { return fmt.Sprintf("order-%s-%d", schema, k) }

	results := make([][]result, keys)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range keys {
		results[k] = make([]result, dups)
		for d := range dups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[k][d] = post(urls[(k+d)%len(urls)], key(k))
			}()
		}
	}
	close(start)
	wg.Wait()

	var runs, distinct int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT key) FROM "+effects).Scan(&runs, &distinct); err != nil {
		t.Fatal(err)
	}
	if runs != keys || distinct != keys {
		t.Fatalf("%d side effects over %d keys, want exactly %d, one per key", runs, distinct, keys)
	}
	var conflicts, replays int
	for k, rs := range results {
		var first []byte
		for _, r := range rs {
			switch {
			case r.err != nil:
				t.Fatalf("key %d: %v", k, r.err)
			case r.status == http.StatusConflict:
				conflicts++
			case r.status != http.StatusCreated:
				t.Fatalf("key %d: status %d %q, want 201 or 409", k, r.status, r.body)
			case !r.replay:
				if first != nil {
					t.Fatalf("key %d: two responses not marked as replays", k)
				}
				first = r.body
			}
		}
		if first == nil {
			t.Fatalf("key %d: no first response", k)
		}
		// Every 201 is the first one, byte for byte; a late duplicate too.
		rs = append(rs, post(urls[k%len(urls)], key(k)))
		for _, r := range rs {
			if r.status == http.StatusCreated && !bytes.Equal(r.body, first) {
				t.Fatalf("key %d: a response %q differs from the first %q", k, r.body, first)
			}
			if r.replay {
				replays++
			}
		}
	}
	t.Logf("%d requests: %d side effects, %d conflicts (409), %d replays", keys*dups+keys, runs, conflicts, replays)
}

// startTestServer starts bin and returns its base URL once it listens.
func startTestServer(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", filepath.Base(bin), stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(l, "listening on ")
		if !ok {
			t.Fatalf("test server said %q", l)
		}
		return "http://" + addr
	case <-time.After(60 * time.Second):
		t.Fatal("test server did not start")
		return ""
	}
}

// TestIntegrationTxCrashes runs three API processes in the transactional
// mode and crashes them (SIGKILL) mid-request: after the handler's insert,
// after its response was written but before the commit, and as the COMMIT
// starts. Each key's client retries on the next process until it gets a
// 201, while a supervisor restarts the dead processes. From the database:
// every key has exactly one side effect and one record, and every 201 is
// for that side effect.
func TestIntegrationTxCrashes(t *testing.T) {
	const keys = 48
	points := []string{"", "insert", "respond", "commit"}
	ctx := context.Background()
	pool, schema, effects, bin := processSetup(t)
	var urls []string
	for i := range 3 {
		urls = append(urls, superviseTestServer(t, bin, "-tx", "-delay", "5ms", "-database", pgtest.URL(), "-schema", schema, "-name", "s"+strconv.Itoa(i)))
	}

	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	post := func(url, key, crash string) (int, []byte, error) {
		req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"item":"book","qty":1}`))
		req.Header.Set("Idempotency-Key", key)
		if crash != "" {
			req.Header.Set("X-Crash", crash)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
	type outcome struct {
		body     []byte
		attempts int
		err      error
	}
	results := make([]outcome, keys)
	sem := make(chan struct{}, 24) // 24 clients at once
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Minute)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			key := fmt.Sprintf("crash-%s-%d", schema, k)
			crash := points[k%len(points)]
			for attempt := 0; ; attempt++ {
				if time.Now().After(deadline) {
					results[k].err = fmt.Errorf("no 201 after %d attempts", attempt)
					return
				}
				status, body, err := post(urls[(k+attempt)%len(urls)], key, crash)
				crash = "" // a retry recovers instead of crashing again
				if err == nil && status == http.StatusCreated {
					results[k] = outcome{body: body, attempts: attempt + 1}
					return
				}
				if err == nil && status != http.StatusConflict && status != http.StatusServiceUnavailable {
					results[k].err = fmt.Errorf("status %d: %s", status, body)
					return
				}
				if err != nil { // the process died: give the supervisor a moment
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()

	retried := 0
	for k, r := range results {
		if r.err != nil {
			t.Fatalf("key %d: %v", k, r.err)
		}
		if r.attempts > 1 {
			retried++
		}
		key := fmt.Sprintf("crash-%s-%d", schema, k)
		var n int
		var id int64
		if err := pool.QueryRow(ctx, "SELECT count(*), coalesce(min(id), 0) FROM "+effects+" WHERE key = $1", key).Scan(&n, &id); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("key %d (crash at %q): %d side effects, want 1", k, points[k%len(points)], n)
		}
		if !bytes.Contains(r.body, []byte(fmt.Sprintf(`"id":%d,`, id))) {
			t.Fatalf("key %d: the 201 %s is not for side effect %d", k, r.body, id)
		}
	}
	var records int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()+
		" WHERE status = 'completed'").Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != keys {
		t.Fatalf("%d completed records, want %d", records, keys)
	}
	t.Logf("%d keys, %d retried after a crash, each with one side effect and one record", keys, retried)
}

// superviseTestServer starts bin on a port of its own and starts it again,
// on the same port, whenever it dies, until the test ends.
func superviseTestServer(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args = append([]string{"-addr", addr}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	ready := make(chan struct{}, 1)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cmd := exec.CommandContext(ctx, bin, args...)
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Errorf("start %s: %v", bin, err)
				return
			}
			s := bufio.NewScanner(stdout)
			if s.Scan() {
				select {
				case ready <- struct{}{}:
				default:
				}
			}
			io.Copy(io.Discard, stdout)
			cmd.Wait()
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("test server did not start")
	}
	return "http://" + addr
}

// TestIntegrationTxDuplicatesAcrossProcesses sends one key 200 times at
// once, spread over three API processes in the transactional mode: one side
// effect, one 201 that is not a replay, and every other answer a 409 or the
// replay of that 201.
func TestIntegrationTxDuplicatesAcrossProcesses(t *testing.T) {
	const dups = 200
	ctx := context.Background()
	pool, schema, effects, bin := processSetup(t)
	var urls []string
	for i := range 3 {
		urls = append(urls, startTestServer(t, bin, "-tx", "-delay", "200ms", "-store-timeout", burstTimeout.String(), "-database", pgtest.URL(),
			"-schema", schema, "-name", "s"+strconv.Itoa(i)))
	}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: dups}}
	t.Cleanup(client.CloseIdleConnections)
	type answer struct {
		status int
		replay bool
		body   string
	}
	answers := make([]answer, dups)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range dups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest(http.MethodPost, urls[i%len(urls)]+"/orders", strings.NewReader(`{"item":"book"}`))
			req.Header.Set("Idempotency-Key", "one-key-"+schema)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			answers[i] = answer{resp.StatusCode, resp.Header.Get(core.HeaderReplay) == "true", string(body)}
		}()
	}
	close(start)
	wg.Wait()
	var runs int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+effects).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	first, conflicts, replays := "", 0, 0
	for _, a := range answers {
		switch {
		case a.status == http.StatusConflict:
			conflicts++
		case a.status == http.StatusCreated && !a.replay:
			if first != "" {
				t.Fatalf("two first answers: %s and %s", first, a.body)
			}
			first = a.body
		case a.status == http.StatusCreated:
			replays++
		default:
			t.Fatalf("answer %d: %s", a.status, a.body)
		}
	}
	if runs != 1 || first == "" {
		t.Fatalf("%d side effects, first answer %q; want one", runs, first)
	}
	t.Logf("%d duplicates over 3 processes: 1 run, %d conflicts, %d replays", dups, conflicts, replays)
}
