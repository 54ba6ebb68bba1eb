//go:build integration

package pgstore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// TestIntegrationExactlyOnceAcrossProcesses runs three API processes on
// one PostgreSQL and sends each of 50 keys 20 times at once, spread over
// the three: the handler's side effect (a row) happens exactly once per key.
func TestIntegrationExactlyOnceAcrossProcesses(t *testing.T) {
	const keys, dups = 50, 20
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	effects := pgx.Identifier{schema, "side_effects"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+effects+" (id bigserial PRIMARY KEY, key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "testserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./internal/testserver").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var urls []string
	for i := range 3 {
		urls = append(urls, startTestServer(t, bin, "-database", pgtest.URL(), "-schema", schema, "-name", "s"+strconv.Itoa(i)))
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
