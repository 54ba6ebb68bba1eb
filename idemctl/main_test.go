package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
	"github.com/idem-go/idem/seal"
)

// idemctl runs the command in-process and returns its exit code and output.
func idemctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// fixture is a miniredis holding what an Engine stored under prefix "shop".
type fixture struct {
	m     *miniredis.Miniredis
	url   string
	store *redislock.Store
	eng   *core.Engine
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	store, err := redislock.New(c, &redislock.Options{Prefix: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{m: m, url: "redis://" + m.Addr() + "?max_retries=-1&dial_timeout=300ms", store: store}
	if f.eng, err = core.New(core.Config{Store: f.store, Observer: func(core.Event) {}}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) acquire(t *testing.T, scope, key string) *core.Lease {
	t.Helper()
	l, _, err := f.eng.Acquire(&core.Call{Scope: scope, Key: key, Route: "/orders", Fingerprint: sha256.Sum256([]byte(key))})
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v", err)
	}
	return l
}

func TestUsage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tests := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"help", []string{"-h"}, exitOK, "usage: idemctl"},
		{"nothing", nil, exitUsage, "usage: idemctl"},
		{"unknown command", []string{"-redis", f.url, "flush"}, exitUsage, `unknown command "flush"`},
		{"unknown flag", []string{"-redis", f.url, "inspect", "-colour"}, exitUsage, "flag provided but not defined"},
		{"no store", []string{"inspect", "-key", "k"}, exitUsage, "give -redis URL, -postgres URL, or both"},
		{"tiered, bad postgres URL", []string{"-redis", f.url, "-postgres", "postgres://x:notaport/db", "inflight"}, exitUsage, "-postgres"},
		{"no key", []string{"-redis", f.url, "inspect", "-scope", "alice"}, exitUsage, "give a key"},
		{"key and id", []string{"-redis", f.url, "purge", "-key", "k", "-id", core.ID("", "k", "")}, exitUsage, "not both"},
		{"bad id", []string{"-redis", f.url, "inspect", "-id", "xyz"}, exitUsage, "64 lowercase hex"},
		{"extra argument", []string{"-redis", f.url, "inspect", "-key", "k", "alice"}, exitUsage, `unexpected argument "alice"`},
		{"prefix on postgres", []string{"-postgres", "postgres://x", "-prefix", "p", "inflight"}, exitUsage, "-prefix is for -redis"},
		{"table on redis", []string{"-redis", f.url, "-table", "t", "inflight"}, exitUsage, "for -postgres"},
		{"prefix with a brace", []string{"-redis", f.url, "-prefix", "a{", "inflight"}, exitUsage, "brace"},
		{"bad redis URL", []string{"-redis", "http://x", "inflight"}, exitUsage, "unsupported URL scheme"},
		{"bad postgres URL", []string{"-postgres", "postgres://x:notaport/db", "inflight"}, exitUsage, "-postgres"},
		{"limit", []string{"-redis", f.url, "inflight", "-limit", "0"}, exitUsage, "-limit"},
		{"unlock without -yes", []string{"-redis", f.url, "unlock", "-key", "k"}, exitRefused, "add -yes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := idemctl(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.err) || stdout != "" {
				t.Fatalf("idemctl %v: exit %d, stdout %q, stderr %q; want exit %d, stderr with %q", tt.args, code, stdout, stderr, tt.code, tt.err)
			}
		})
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.acquire(t, "alice", "order-1").Complete(&core.Record{Code: 201, Header: map[string][]string{"Location": {"/orders/7"}}, Body: []byte(`{"id":7}`)})
	id := core.ID("alice", "order-1", "")

	// Flags before and after the command, the scope and key alone.
	code, stdout, stderr := idemctl(t, "-redis", f.url, "-prefix", "shop", "inspect", "-scope", "alice", "-key", "order-1", "-json")
	var k admin.Key
	if err := json.Unmarshal([]byte(stdout), &k); code != exitOK || err != nil {
		t.Fatalf("inspect -json: exit %d, %q, %q", code, stdout, stderr)
	}
	if k.ID != id || k.Status != "completed" || k.Scope != "alice" || k.Key != "order-1" || k.Code != 201 || k.Size != 8 ||
		k.Created.IsZero() || k.Completed.IsZero() || k.Expires.IsZero() || k.Body != "" || k.Header != nil {
		t.Fatalf("inspect -json: %s", stdout)
	}

	code, stdout, _ = idemctl(t, "inspect", "-id", id, "-redis", f.url, "-prefix", "shop", "-body")
	for _, want := range []string{
		"status     completed\n", "code       201\n", "size       8 bytes\n", "header     Location: /orders/7\n", "\nbody:\n{\"id\":7}\n",
	} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("inspect -body: exit %d, output lacks %q:\n%s", code, want, stdout)
		}
	}
	code, stdout, _ = idemctl(t, "-redis", f.url, "-prefix", "shop", "inspect", "-scope", "alice", "-key", "order-1")
	if strings.Contains(stdout, "body") || strings.Contains(stdout, "/orders/7") {
		t.Errorf("inspect without -body shows the response: exit %d\n%s", code, stdout)
	}

	// Another scope's key, or another prefix, is not found.
	for _, args := range [][]string{
		{"-redis", f.url, "-prefix", "shop", "inspect", "-scope", "bob", "-key", "order-1"},
		{"-redis", f.url, "inspect", "-scope", "alice", "-key", "order-1"},
	} {
		if code, stdout, stderr := idemctl(t, args...); code != exitNotFound || stdout != "" || !strings.Contains(stderr, "not found") {
			t.Errorf("idemctl %v: exit %d, %q, %q; want 1", args, code, stdout, stderr)
		}
	}
}

func TestPurgeUnlockInFlight(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	redisFlags := []string{"-redis", f.url, "-prefix", "shop"}
	cmd := func(args ...string) (int, string, string) { return idemctl(t, append(redisFlags, args...)...) }

	f.acquire(t, "alice", "done").Complete(&core.Record{Code: 201})
	running := f.acquire(t, "alice", "running")
	time.Sleep(2 * time.Millisecond) // a lock's time is kept to the millisecond
	stuck := f.acquire(t, "bob", "stuck")

	// inflight lists both locks, the oldest first, in JSON and as a table.
	code, stdout, _ := cmd("inflight", "-json")
	var list admin.KeyList
	if err := json.Unmarshal([]byte(stdout), &list); code != exitOK || err != nil || len(list.Keys) != 2 ||
		list.Keys[0].ID != core.ID("alice", "running", "") || list.Keys[1].ID != core.ID("bob", "stuck", "") || list.Keys[0].LockedAt.IsZero() {
		t.Fatalf("inflight -json: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = cmd("inflight", "-limit", "1")
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); code != exitOK || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], core.ID("alice", "running", "")+"  in_flight  ") {
		t.Fatalf("inflight -limit 1: exit %d\n%s", code, stdout)
	}

	// purge: refused in flight, done on a record, not found after.
	if code, _, stderr := cmd("purge", "-scope", "alice", "-key", "running"); code != exitRefused || !strings.Contains(stderr, "in flight") {
		t.Fatalf("purge in flight: exit %d, %q", code, stderr)
	}
	want := `{"id":"` + core.ID("alice", "done", "") + `","purged":true}` + "\n"
	if code, stdout, _ := cmd("purge", "-scope", "alice", "-key", "done", "-json"); code != exitOK || stdout != want {
		t.Fatalf("purge: exit %d, %q", code, stdout)
	}
	if code, _, _ := cmd("purge", "-scope", "alice", "-key", "done"); code != exitNotFound {
		t.Fatalf("purge twice: exit %d", code)
	}
	f.acquire(t, "alice", "done").Release(0, nil) // the key runs anew

	// unlock: the stuck lock goes; its request can no longer complete.
	if code, stdout, _ := cmd("unlock", "-yes", "-scope", "bob", "-key", "stuck"); code != exitOK || stdout != "unlocked "+core.ID("bob", "stuck", "")+"\n" {
		t.Fatalf("unlock: exit %d, %q", code, stdout)
	}
	f.acquire(t, "bob", "stuck").Release(0, nil)
	stuck.Release(0, nil)
	if code, _, _ := cmd("unlock", "-yes", "-scope", "bob", "-key", "stuck"); code != exitNotFound {
		t.Fatalf("unlock of nothing: exit %d", code)
	}
	running.Release(0, nil)
	if code, stdout, _ := cmd("inflight"); code != exitOK || stdout != "no keys in flight\n" {
		t.Fatalf("inflight of none: exit %d, %q", code, stdout)
	}
}

func TestStoreDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.m.Close()
	for _, args := range [][]string{
		{"inspect", "-key", "k"},
		{"purge", "-key", "k"},
		{"unlock", "-key", "k", "-yes"},
		{"inflight"},
	} {
		start := time.Now()
		code, stdout, stderr := idemctl(t, append([]string{"-redis", f.url}, args...)...)
		if code != exitStore || stdout != "" || !strings.Contains(stderr, "store error") {
			t.Errorf("idemctl %v on a Redis that is down: exit %d, %q, %q (%v)", args, code, stdout, stderr, time.Since(start))
		}
	}
}

// TestInspectEscapes: stored bytes never reach the operator's terminal raw:
// escape sequences in a stored header, body or scope are printed escaped.
func TestInspectEscapes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const evil = "\x1b]0;pwned\x07\x1b[2J\u202e"
	f.acquire(t, "mal"+evil, "k").Complete(&core.Record{Code: 200, Header: map[string][]string{"X-Evil": {evil}},
		Body: []byte("{\"a\": 1,\n\t\"b\": \"" + evil + "\"}")})
	code, stdout, stderr := idemctl(t, "-redis", f.url, "-prefix", "shop", "inspect", "-scope", "mal"+evil, "-key", "k", "-body")
	if code != exitOK {
		t.Fatalf("inspect: exit %d, %s", code, stderr)
	}
	if strings.ContainsAny(stdout, "\x1b\x07\u202e") {
		t.Fatalf("inspect printed raw control characters: %q", stdout)
	}
	for _, want := range []string{`\x1b]0;pwned\a\x1b[2J\u202e`, "X-Evil: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q: %q", want, stdout)
		}
	}

	// -json too: encoding/json leaves DEL, C1 controls (U+009B is CSI) and
	// bidi overrides raw; the exact bytes still decode from the escapes.
	const c1 = "\x7f\u009b2J\u202e\U0001F600\U000E0041"
	f.acquire(t, "c1", "k").Complete(&core.Record{Code: 200, Header: map[string][]string{"X-Evil": {c1}}, Body: []byte(c1)})
	code, stdout, stderr = idemctl(t, "-redis", f.url, "-prefix", "shop", "inspect", "-scope", "c1", "-key", "k", "-body", "-json")
	var k admin.Key
	if err := json.Unmarshal([]byte(stdout), &k); code != exitOK || err != nil {
		t.Fatalf("inspect -json: exit %d, %v, %s%s", code, err, stdout, stderr)
	}
	if strings.ContainsAny(stdout, "\x7f\u009b\u202e") || k.Body != c1 || k.Header["X-Evil"][0] != c1 || !strings.Contains(stdout, `\u009b2J`) {
		t.Errorf("inspect -json printed raw control characters, or not the stored bytes: %q", stdout)
	}
}

// A sealed record shows its times and key id; with IDEM_SEAL_KEYS, all of
// it. (Not parallel: t.Setenv.)
func TestInspectSealed(t *testing.T) {
	f := newFixture(t)
	spec := "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, seal.KeySize))
	keys, err := seal.ParseKeys(spec)
	if err != nil {
		t.Fatal(err)
	}
	if f.eng, err = core.New(core.Config{Store: f.store, Sealer: seal.New(keys), Observer: func(core.Event) {}}); err != nil {
		t.Fatal(err)
	}
	f.acquire(t, "alice", "order-1").Complete(&core.Record{Code: 201, Header: map[string][]string{"Location": {"/orders/7"}}, Body: []byte(`{"id":7}`)})
	args := []string{"-redis", f.url, "-prefix", "shop", "inspect", "-scope", "alice", "-key", "order-1", "-body"}

	code, stdout, stderr := idemctl(t, args...)
	if code != exitOK || !strings.Contains(stdout, "sealed     by key k1: its keys open") || strings.Contains(stdout, "/orders/7") ||
		!strings.Contains(stdout, "created ") {
		t.Fatalf("without the keys: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Setenv("IDEM_SEAL_KEYS", spec)
	code, stdout, stderr = idemctl(t, args...)
	for _, want := range []string{
		"scope      alice\n", "code       201\n", "sealed     by key k1\n", "header     Location: /orders/7\n", "\nbody:\n{\"id\":7}\n",
	} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("with the keys: exit %d, output lacks %q:\n%s%s", code, want, stdout, stderr)
		}
	}
	// Keys that do not open it: what shows, why, and an exit code that says so.
	t.Setenv("IDEM_SEAL_KEYS", "k2:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, seal.KeySize)))
	code, stdout, stderr = idemctl(t, args...)
	if code != exitRecord || !strings.Contains(stdout, "error ") || !strings.Contains(stdout, "k1") || strings.Contains(stdout, "/orders/7") {
		t.Errorf("with other keys: exit %d, want %d\n%s%s", code, exitRecord, stdout, stderr)
	}
	t.Setenv("IDEM_SEAL_KEYS", "k1:short")
	if code, _, stderr := idemctl(t, args...); code != exitUsage || !strings.Contains(stderr, "IDEM_SEAL_KEYS") {
		t.Errorf("bad keys: exit %d, %q", code, stderr)
	}
}

// Against a Redis that answers nothing, idemctl makes one attempt and
// says why, rather than ride it out as a server's client would (go-redis's
// default is four attempts, each dialled again for its dial_timeout).
func TestOneAttempt(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	code, stdout, stderr := idemctl(t, "-redis", "redis://"+ln.Addr().String(), "inspect", "-key", "k")
	ln.Close()
	if code != exitStore || stdout != "" || !strings.Contains(stderr, "store error") {
		t.Errorf("exit %d, %q, %q", code, stdout, stderr)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}
