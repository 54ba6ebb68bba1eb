package admin_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/seal"
)

// complete runs one call of (scope, key) on eng to completion with rec.
func complete(t *testing.T, eng *core.Engine, scope, key string, rec *core.Record) {
	t.Helper()
	l, _, err := eng.Acquire(&core.Call{Scope: scope, Key: key, Route: "/orders", Fingerprint: sha256.Sum256([]byte(key))})
	if err != nil || l == nil {
		t.Fatalf("Acquire(%s, %s): %v", scope, key, err)
	}
	l.Complete(rec)
}

// lock starts a call of (scope, key) on eng and returns its lease.
func lock(t *testing.T, eng *core.Engine, scope, key string) *core.Lease {
	t.Helper()
	l, _, err := eng.Acquire(&core.Call{Scope: scope, Key: key, Route: "/orders", Fingerprint: sha256.Sum256([]byte(key))})
	if err != nil || l == nil {
		t.Fatalf("Acquire(%s, %s): %v", scope, key, err)
	}
	return l
}

func newEngine(t *testing.T, store core.Store) *core.Engine {
	t.Helper()
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func TestTargetStoreKey(t *testing.T) {
	t.Parallel()
	id := core.ID("alice", "k1", "")
	tests := []struct {
		name   string
		target admin.Target
		want   string
		err    error
	}{
		{"scope and key", admin.Target{Scope: "alice", Key: "k1"}, id, nil},
		{"no scope", admin.Target{Key: "k1"}, core.ID("", "k1", ""), nil},
		{"route joined", admin.Target{Scope: "alice", Key: "k1", Route: "/orders"}, core.ID("alice", "k1", "/orders"), nil},
		{"id", admin.Target{ID: id}, id, nil},
		{"nothing", admin.Target{}, "", admin.ErrNoKey},
		{"scope alone", admin.Target{Scope: "alice"}, "", admin.ErrNoKey},
		{"id and key", admin.Target{ID: id, Key: "k1"}, "", admin.ErrBadTarget},
		{"short id", admin.Target{ID: id[:63]}, "", admin.ErrBadTarget},
		{"upper-case id", admin.Target{ID: strings.ToUpper(id)}, "", admin.ErrBadTarget},
		{"id with a brace", admin.Target{ID: id[:62] + "{}"}, "", admin.ErrBadTarget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.target.StoreKey()
			if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("StoreKey = %q, %v; want %q, %v", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	eng := newEngine(t, store)
	before := time.Now()
	complete(t, eng, "alice", "k-text", &core.Record{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)})
	complete(t, eng, "alice", "k-bin", &core.Record{Code: 200, Body: []byte{0xff, 0, 1}})
	after := time.Now()

	k, err := admin.Inspect(ctx, store, core.ID("alice", "k-text", ""), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.ID != core.ID("alice", "k-text", "") || k.Status != admin.StatusCompleted || k.Scope != "alice" || k.Key != "k-text" ||
		k.Code != 201 || k.Size != 8 || k.Body != "" || k.Header != nil || k.LockedAt != (time.Time{}) {
		t.Fatalf("Inspect = %+v", k)
	}
	for name, tm := range map[string]time.Time{"created": k.Created, "completed": k.Completed} {
		if tm.Before(before) || tm.After(after) {
			t.Errorf("%s = %v, want between %v and %v", name, tm, before, after)
		}
	}
	if want := k.Completed.Add(24 * time.Hour); k.Expires.Sub(want).Abs() > time.Second {
		t.Errorf("expires = %v, want about %v", k.Expires, want)
	}

	k, err = admin.Inspect(ctx, store, core.ID("alice", "k-text", ""), true, nil)
	if err != nil || k.Body != `{"id":1}` || k.BodyBase64 || k.Header["Content-Type"][0] != "application/json" {
		t.Fatalf("Inspect with the body = %+v, %v", k, err)
	}
	k, err = admin.Inspect(ctx, store, core.ID("alice", "k-bin", ""), true, nil)
	if err != nil || k.Body != "/wAB" || !k.BodyBase64 || k.Size != 3 {
		t.Fatalf("Inspect of a binary body = %+v, %v", k, err)
	}
	if _, err := admin.Inspect(ctx, store, core.ID("bob", "k-text", ""), false, nil); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Inspect of another scope's key: %v, want ErrNotFound", err)
	}
}

func TestInspectOddRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	eng := newEngine(t, store)
	complete(t, eng, "", "big", &core.Record{Code: 200, BodyOmitted: true, BodySize: 10})
	k, err := admin.Inspect(ctx, store, core.ID("", "big", ""), true, nil)
	if err != nil || !k.BodyOmitted || k.Size != 10 || k.Body != "" {
		t.Fatalf("Inspect of an omitted body = %+v, %v", k, err)
	}
	// A record that is not the Engine's is shown as such.
	id := core.ID("", "odd", "")
	_, token, _ := store.Acquire(ctx, id, time.Minute)
	store.Complete(ctx, id, token, []byte("not a record"), time.Minute)
	k, err = admin.Inspect(ctx, store, id, true, nil)
	if err != nil || k.Status != admin.StatusCompleted || k.Size != 12 || !strings.Contains(k.Error, "corrupt") {
		t.Fatalf("Inspect of a foreign record = %+v, %v", k, err)
	}
}

func TestInFlightAndOldest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	eng := newEngine(t, store)
	if d, err := admin.OldestInFlight(ctx, store); d != 0 || err != nil {
		t.Fatalf("OldestInFlight of an empty store = %v, %v", d, err)
	}
	start := time.Now()
	first := lock(t, eng, "alice", "k1")
	defer first.Release(0, nil)
	second := lock(t, eng, "bob", "k2")
	defer second.Release(0, nil)
	complete(t, eng, "carol", "k3", &core.Record{Code: 201})

	keys, err := admin.InFlight(ctx, store, 10)
	if err != nil || len(keys) != 2 || keys[0].ID != core.ID("alice", "k1", "") || keys[1].ID != core.ID("bob", "k2", "") {
		t.Fatalf("InFlight = %+v, %v", keys, err)
	}
	for _, k := range keys {
		if k.Status != admin.StatusInFlight || k.LockedAt.Before(start) || k.AgeSeconds < 0 || k.Expires.IsZero() {
			t.Fatalf("in-flight key %+v", k)
		}
	}
	if keys, err := admin.InFlight(ctx, store, 0); err != nil || len(keys) != 0 {
		t.Fatalf("InFlight(0) = %+v, %v", keys, err)
	}
	d, err := admin.OldestInFlight(ctx, store)
	if err != nil || d < 0 || d > time.Since(start) {
		t.Fatalf("OldestInFlight = %v, %v; want at most %v", d, err, time.Since(start))
	}
}

func TestWriteKey(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b bytes.Buffer
	err := admin.WriteKey(&b, admin.Key{
		ID: "abc", Status: admin.StatusCompleted, Scope: "alice", Key: "k1", Code: 201,
		Created: created, Completed: created.Add(time.Second), Expires: time.Now().Add(time.Hour + 30*time.Second),
		Size: 8, Header: map[string][]string{"Location": {"/orders/1"}, "Content-Type": {"application/json"}}, Body: `{"id":1}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"id         abc\n",
		"status     completed\n",
		"scope      alice\n",
		"key        k1\n",
		"code       201\n",
		"created    2026-01-02T03:04:05Z (",
		"completed  2026-01-02T03:04:06Z (",
		"(in 1h0m30s)\n",
		"size       8 bytes\n",
		"header     Content-Type: application/json\nheader     Location: /orders/1\n",
		"\nbody:\n{\"id\":1}\n",
	}
	for _, w := range want {
		if !strings.Contains(b.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, b.String())
		}
	}
	if strings.Contains(b.String(), "locked at") {
		t.Errorf("a record's output shows a lock time:\n%s", b.String())
	}
}

// TestWriteKeyEscapes: control characters and invalid UTF-8 of stored
// values are written escaped; the body keeps its newlines and tabs.
func TestWriteKeyEscapes(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	err := admin.WriteKey(&b, admin.Key{ID: "abc", Status: admin.StatusCompleted, Scope: "a\xffb\tc",
		Header: map[string][]string{"X-\x1b": {"\u009b31m"}}, Body: "{\n\t\"a\": \"\x1b[2J\"}"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`scope   a\xffb\tc`, `header  X-\x1b: \u009b31m`, "body (control characters escaped):\n{\n\t\"a\": \"\\x1b[2J\"}\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%q", want, b.String())
		}
	}
}

func TestWriteKeys(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := admin.WriteKeys(&b, nil); err != nil || b.String() != "no keys in flight\n" {
		t.Fatalf("WriteKeys(nil) = %q, %v", b.String(), err)
	}
	b.Reset()
	locked := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	err := admin.WriteKeys(&b, []admin.Key{
		{ID: "aaa", Status: admin.StatusInFlight, LockedAt: locked, AgeSeconds: 125.4, Expires: locked.Add(5 * time.Minute)},
		{ID: "bbbbbb", Status: admin.StatusInFlight},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 ||
		!strings.HasPrefix(lines[0], "ID      STATUS     LOCKED AT             AGE      EXPIRES") ||
		!strings.HasPrefix(lines[1], "aaa     in_flight  2026-01-02T03:04:05Z  2m5s     2026-01-02T03:09:05Z (") ||
		lines[2] != "bbbbbb  in_flight  unknown               unknown  " {
		t.Fatalf("WriteKeys:\n%s", b.String())
	}
}

// A lock key planted in the store with escape sequences in its name (Redis
// InFlight lists any "<prefix>-lock:{…}") reaches the terminal escaped.
func TestWriteKeysEscapes(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := admin.WriteKeys(&b, []admin.Key{{ID: "\x1b]0;title\a\x1b[31mred", Status: "in_\u009bflight"}}); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\a\u009b") || !strings.Contains(b.String(), `\x1b]0;title\a\x1b[31mred  in_\u009bflight`) {
		t.Fatalf("WriteKeys:\n%q", b.String())
	}
}

// testSealer returns a Sealer of one key, k1.
func testSealer(t *testing.T) *seal.Sealer {
	t.Helper()
	keys, err := seal.ParseKeys("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, seal.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	return seal.New(keys)
}

// A sealed record shows its times and key id without the keys, and all of
// it with them; WriteKey says which.
func TestInspectSealed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	sealer := testSealer(t)
	eng, err := core.New(core.Config{Store: store, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	complete(t, eng, "alice", "k", &core.Record{Code: 201, Header: map[string][]string{"Location": {"/orders/9"}}, Body: []byte(`{"id":9}`)})
	id := core.ID("alice", "k", "")

	k, err := admin.Inspect(ctx, store, id, true, nil)
	if err != nil || k.SealedBy != "k1" || k.Scope != "" || k.Key != "" || k.Code != 0 || k.Body != "" || k.Header != nil ||
		k.Created.IsZero() || k.Completed.IsZero() || k.Expires.IsZero() {
		t.Fatalf("Inspect without the keys = %+v, %v", k, err)
	}
	var out strings.Builder
	if err := admin.WriteKey(&out, k); err != nil || !strings.Contains(out.String(), "by key k1: its keys open") || strings.Contains(out.String(), "size") {
		t.Fatalf("WriteKey without the keys:\n%s", out.String())
	}

	k, err = admin.Inspect(ctx, store, id, true, sealer)
	if err != nil || k.SealedBy != "k1" || k.Scope != "alice" || k.Key != "k" || k.Code != 201 || k.Body != `{"id":9}` ||
		k.Header["Location"][0] != "/orders/9" || k.Error != "" {
		t.Fatalf("Inspect with the keys = %+v, %v", k, err)
	}
	out.Reset()
	if err := admin.WriteKey(&out, k); err != nil || !strings.Contains(out.String(), "sealed     by key k1\n") || !strings.Contains(out.String(), "/orders/9") {
		t.Fatalf("WriteKey with the keys:\n%s", out.String())
	}

	other, _ := seal.ParseKeys("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, seal.KeySize)))
	k, err = admin.Inspect(ctx, store, id, true, seal.New(other))
	if err != nil || !strings.Contains(k.Error, "corrupt") || k.Body != "" {
		t.Fatalf("Inspect with the wrong keys = %+v, %v", k, err)
	}
}

// A record stored in clear, inspected with the Sealer of an Engine that
// answers 503 for it, says so: the operator looking for the cause of the
// 503s does not see a healthy record.
func TestInspectClearUnderSealer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	complete(t, newEngine(t, store), "alice", "k", &core.Record{Code: 201, Body: []byte(`{"id":9}`)})
	id := core.ID("alice", "k", "")
	sealer := testSealer(t)

	// What the Engine with the Sealer answers: no replay, a store error.
	eng, err := core.New(core.Config{Store: store, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	l, rec, err := eng.Acquire(&core.Call{Scope: "alice", Key: "k", Route: "/orders", Fingerprint: sha256.Sum256([]byte("k"))})
	if l != nil || rec != nil || !errors.Is(err, core.ErrCorruptRecord) {
		t.Fatalf("Engine with a Sealer on a clear record: lease %v, record %v, %v; want ErrCorruptRecord", l != nil, rec, err)
	}

	k, err := admin.Inspect(ctx, store, id, false, sealer)
	if err != nil || !strings.Contains(k.Error, "stored in clear") || k.Code != 201 || k.Key != "k" {
		t.Fatalf("Inspect with a Sealer = %+v, %v; want the record with an Error saying it is in clear", k, err)
	}
	if k, err := admin.Inspect(ctx, store, id, false, nil); err != nil || k.Error != "" {
		t.Fatalf("Inspect without a Sealer = %+v, %v; want no error", k, err)
	}
}
