package core_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/seal"
)

func sealer(t testing.TB, spec string) core.Sealer {
	t.Helper()
	var parts []string
	for _, id := range strings.Split(spec, ",") {
		k := bytes.Repeat([]byte(id[:1]), seal.KeySize)
		parts = append(parts, id+":"+base64.StdEncoding.EncodeToString(k))
	}
	keys, err := seal.ParseKeys(strings.Join(parts, ","))
	if err != nil {
		t.Fatal(err)
	}
	return seal.New(keys)
}

const (
	sealedBody     = `{"id":1,"item":"secret-book"}`
	sealedLocation = "/orders/secret-location"
)

// sealedApp is a handler behind eng that counts its runs.
func sealedApp(t *testing.T, cfg core.Config) (http.Handler, *atomic.Int32) {
	t.Helper()
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	return eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Location", sealedLocation)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, sealedBody)
	})), &runs
}

func postAs(h http.Handler, user, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("X-User-ID", user)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var byUser = func(r *core.Request) string { return r.Header.Get("X-User-ID") }

// The store holds no byte of the response, the key or the scope in clear;
// the replay is the response; metadata decodes without the keys, the rest
// opens with them only.
func TestSealedRecordHoldsNothingInClear(t *testing.T) {
	store := core.NewMemoryStore(0)
	s := sealer(t, "a")
	h, runs := sealedApp(t, core.Config{Store: store, Scope: byUser, Sealer: s})
	first := postAs(h, "alice-scope", "key-in-clear")
	replay := postAs(h, "alice-scope", "key-in-clear")
	if first.Code != 201 || replay.Code != 201 || replay.Body.String() != sealedBody ||
		replay.Header().Get("Location") != sealedLocation || replay.Header().Get(core.HeaderReplay) != "true" || runs.Load() != 1 {
		t.Fatalf("first %d, replay %d %q %v, runs %d", first.Code, replay.Code, replay.Body, replay.Header(), runs.Load())
	}
	id := core.ID("alice-scope", "key-in-clear", "")
	st, err := store.Inspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, clear := range []string{"secret-book", "secret-location", "Location", "key-in-clear", "alice-scope", "application/json"} {
		if bytes.Contains(st.Record, []byte(clear)) {
			t.Errorf("stored record holds %q in clear", clear)
		}
	}
	meta, err := core.DecodeRecord(st.Record)
	if err != nil || meta.SealedBy != "a" || meta.RequestedAt.IsZero() || meta.ExpiresAt.Before(meta.CompletedAt) || meta.Code != 0 || meta.Body != nil {
		t.Fatalf("DecodeRecord of a sealed record = %+v, %v", meta, err)
	}
	if _, err := core.OpenRecord(context.Background(), nil, id, st.Record); !errors.Is(err, core.ErrCorruptRecord) {
		t.Fatalf("OpenRecord without a sealer: err = %v", err)
	}
	rec, err := core.OpenRecord(context.Background(), s, id, st.Record)
	if err != nil || rec.Scope != "alice-scope" || rec.Key != "key-in-clear" || rec.Code != 201 || string(rec.Body) != sealedBody ||
		rec.SealedBy != "a" || !rec.RequestedAt.Equal(meta.RequestedAt) {
		t.Fatalf("OpenRecord = %+v, %v", rec, err)
	}
}

// A new primary key in front seals new records; records of the old key
// keep replaying.
func TestSealRotationKeepsOldRecordsReplaying(t *testing.T) {
	store := core.NewMemoryStore(0)
	old, _ := sealedApp(t, core.Config{Store: store, Scope: byUser, Sealer: sealer(t, "a")})
	if w := postAs(old, "u", "k1"); w.Code != 201 {
		t.Fatal(w.Code)
	}
	rotated, runs := sealedApp(t, core.Config{Store: store, Scope: byUser, Sealer: sealer(t, "b,a")})
	if w := postAs(rotated, "u", "k1"); w.Code != 201 || w.Header().Get(core.HeaderReplay) != "true" || w.Body.String() != sealedBody || runs.Load() != 0 {
		t.Fatalf("old record after rotation: %d %v %q, runs %d", w.Code, w.Header(), w.Body, runs.Load())
	}
	postAs(rotated, "u", "k2")
	st, _ := store.Inspect(context.Background(), core.ID("u", "k2", ""))
	if rec, _ := core.DecodeRecord(st.Record); rec == nil || rec.SealedBy != "b" {
		t.Fatalf("new record sealed by %+v, want b", rec)
	}
}

// A record copied to another key (another scope, or another client key)
// or tampered with does not open: a store error, never replayed (503 with
// FailClosed).
func TestSealedRecordMovedOrTamperedIsRefused(t *testing.T) {
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	var ev events
	h, runs := sealedApp(t, core.Config{Store: store, Scope: byUser, Sealer: sealer(t, "a"), FailClosed: true, Observer: ev.observe})
	postAs(h, "alice", "k")
	st, err := store.Inspect(ctx, core.ID("alice", "k", ""))
	if err != nil {
		t.Fatal(err)
	}
	put := func(id string, rec []byte) {
		t.Helper()
		_, token, err := store.Acquire(ctx, id, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Complete(ctx, id, token, rec, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	tampered := bytes.Clone(st.Record)
	tampered[len(tampered)-20] ^= 1
	put(core.ID("mallory", "k", ""), st.Record)     // another scope
	put(core.ID("alice", "other", ""), st.Record)   // another client key
	put(core.ID("alice", "tampered", ""), tampered) // a flipped bit
	for _, c := range [][2]string{{"mallory", "k"}, {"alice", "other"}, {"alice", "tampered"}} {
		w := postAs(h, c[0], c[1])
		if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "secret") {
			t.Errorf("%v: %d %q, want 503", c, w.Code, w.Body)
		}
	}
	if runs.Load() != 1 || ev.count(core.OutcomeStoreError) != 3 {
		t.Fatalf("runs %d, store errors %d", runs.Load(), ev.count(core.OutcomeStoreError))
	}
	for _, e := range ev.all {
		if e.Outcome == core.OutcomeStoreError && !errors.Is(e.Err, core.ErrCorruptRecord) {
			t.Errorf("event error %v, want ErrCorruptRecord", e.Err)
		}
	}
}

// Records stored in clear before the Sealer was set replay until
// Config.ClearRecordsUntil, and are refused after it or without it (someone
// who can write to the store could plant one); a sealed record met without
// a Sealer is a store error.
func TestSealerAddedOrRemoved(t *testing.T) {
	store := core.NewMemoryStore(0)
	plain, _ := sealedApp(t, core.Config{Store: store, Scope: byUser})
	postAs(plain, "u", "clear")
	for _, tc := range []struct {
		name   string
		until  time.Time
		replay bool
	}{
		{"no window", time.Time{}, false},
		{"window passed", time.Now().Add(-time.Second), false},
		{"window open", time.Now().Add(time.Hour), true},
	} {
		var ev events
		sealed, runs := sealedApp(t, core.Config{Store: store, Scope: byUser, Sealer: sealer(t, "a"), ClearRecordsUntil: tc.until,
			Observer: ev.observe})
		w := postAs(sealed, "u", "clear")
		switch {
		case runs.Load() != 0:
			t.Errorf("%s: the handler ran for a stored key", tc.name)
		case tc.replay && w.Header().Get(core.HeaderReplay) != "true":
			t.Errorf("%s: record in clear: %d %v, want a replay", tc.name, w.Code, w.Header())
		case !tc.replay && (w.Code != http.StatusServiceUnavailable || len(ev.all) != 1 || !errors.Is(ev.all[0].Err, core.ErrCorruptRecord)):
			t.Errorf("%s: record in clear: %d, events %+v; want 503 and a corrupt record", tc.name, w.Code, ev.all)
		}
	}
	sealed, _ := sealedApp(t, core.Config{Store: store, Scope: byUser, Sealer: sealer(t, "a")})
	postAs(sealed, "u", "sealed")
	var ev events
	keyless, runs := sealedApp(t, core.Config{Store: store, Scope: byUser, FailClosed: true, Observer: ev.observe})
	if w := postAs(keyless, "u", "sealed"); w.Code != http.StatusServiceUnavailable || runs.Load() != 0 {
		t.Fatalf("sealed record without a Sealer: %d, runs %d", w.Code, runs.Load())
	}
}

// failingSealer cannot reach its keys.
type failingSealer struct{ core.Sealer }

func (failingSealer) Seal(context.Context, []byte, []byte) (string, []byte, error) {
	return "", nil, errors.New("kms unreachable")
}

// A record that cannot be sealed is not stored, in clear or otherwise: a
// store error, and the lock is left to expire as when the store fails.
func TestSealFailureStoresNothing(t *testing.T) {
	store := core.NewMemoryStore(0)
	var ev events
	h, runs := sealedApp(t, core.Config{Store: store, Scope: byUser, Sealer: failingSealer{}, Observer: ev.observe})
	postAs(h, "u", "k")
	if w := postAs(h, "u", "k"); w.Code != http.StatusConflict || runs.Load() != 1 {
		t.Fatalf("retry: %d, runs %d; want 409 and one run", w.Code, runs.Load())
	}
	st, err := store.Inspect(context.Background(), core.ID("u", "k", ""))
	if err != nil || st.Record != nil || ev.count(core.OutcomeStoreError) != 1 {
		t.Fatalf("store holds %+v, %v; store errors %d", st, err, ev.count(core.OutcomeStoreError))
	}
}

// FuzzOpenRecord: whatever the bytes, OpenRecord never panics and fails
// with ErrCorruptRecord; it opens only what the Engine sealed for that
// store key.
func FuzzOpenRecord(f *testing.F) {
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	s := sealer(f, "a")
	eng, err := core.New(core.Config{Store: store, Sealer: s})
	if err != nil {
		f.Fatal(err)
	}
	l, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil {
		f.Fatal(err)
	}
	l.Complete(&core.Record{Code: 201, Header: map[string][]string{"A": {"b"}}, Body: []byte("body")})
	id := core.ID("", "k", "")
	st, err := store.Inspect(ctx, id)
	if err != nil {
		f.Fatal(err)
	}
	want := bytes.Clone(st.Record) // the fuzzer may write into the seeds
	f.Add(bytes.Clone(want))
	f.Add(bytes.Clone(want[:len(want)/2]))
	f.Add(bytes.Clone(want[:12]))
	f.Add([]byte{2, 0, 0, 0, 1, 'a'})
	f.Add([]byte{2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := core.OpenRecord(ctx, s, id, data)
		if err != nil {
			if !errors.Is(err, core.ErrCorruptRecord) {
				t.Fatalf("error %v does not wrap ErrCorruptRecord", err)
			}
			return
		}
		// (Each fuzzing process seals its own record: compare contents.)
		if rec.SealedBy != "" && (rec.Key != "k" || rec.Code != 201 || string(rec.Body) != "body" || rec.Header["A"][0] != "b") {
			t.Fatalf("opened a sealed record the Engine did not seal: %+v", rec)
		}
	})
}

// Step checkpoints are sealed too, bound to their key and step: the store
// holds no result in clear, the retry resumes from them, and a checkpoint
// moved to another step does not open.
func TestSealedCheckpoints(t *testing.T) {
	ctx := context.Background()
	store := core.NewMemoryStore(0)
	eng := newDoEngine(t, core.Config{Store: store, Sealer: sealer(t, "a")})
	p := &payments{failRecord: true}
	h := eng.Middleware(p)
	if w := post(t, h, "k1", "{}"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first run: %d %s", w.Code, w.Body)
	}
	id := core.ID("", "k1", "")
	steps, err := store.LoadSteps(ctx, id)
	if err != nil || len(steps["charge"]) == 0 || bytes.Contains(steps["charge"], []byte("ch_1")) {
		t.Fatalf("checkpoints %q, %v; want the charge's, sealed", steps, err)
	}

	// The charge's checkpoint copied to another key's lease, as step
	// "charge", does not open there.
	_, token, err := store.Acquire(ctx, core.ID("", "k2", ""), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SaveStep(ctx, core.ID("", "k2", ""), token, "charge", steps["charge"], time.Minute); err != nil {
		t.Fatal(err)
	}
	store.Release(ctx, core.ID("", "k2", ""), token) //nolint:errcheck
	p.failRecord = false
	if w := post(t, h, "k2", "{}"); w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "corrupt") || p.charges != 1 {
		t.Fatalf("moved checkpoint: %d %s, charges %d", w.Code, w.Body, p.charges)
	}

	w := post(t, h, "k1", "{}")
	if w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"id":"ch_1"`) || p.charges != 1 {
		t.Fatalf("retry: %d %s, charges %d", w.Code, w.Body, p.charges)
	}

	// A checkpoint planted in clear is refused as a moved one is, unless
	// within Config.ClearRecordsUntil.
	for _, until := range []time.Time{{}, time.Now().Add(time.Hour)} {
		key := "k3-" + strconv.FormatBool(until.IsZero())
		_, token, err = store.Acquire(ctx, core.ID("", key, ""), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.SaveStep(ctx, core.ID("", key, ""), token, "charge", []byte(`{"id":"ch_planted"}`), time.Minute); err != nil {
			t.Fatal(err)
		}
		store.Release(ctx, core.ID("", key, ""), token) //nolint:errcheck
		h := newDoEngine(t, core.Config{Store: store, Sealer: sealer(t, "a"), ClearRecordsUntil: until}).Middleware(p)
		w := post(t, h, key, "{}")
		planted := strings.Contains(w.Body.String(), "ch_planted")
		if until.IsZero() && (w.Code != http.StatusInternalServerError || planted) || !until.IsZero() && (w.Code != http.StatusCreated || !planted) {
			t.Errorf("checkpoint in clear, ClearRecordsUntil %v: %d %s", until, w.Code, w.Body)
		}
	}
}

// A second Step of one name returns the first's checkpoint, sealed or not.
func TestStepTwiceSealed(t *testing.T) {
	for _, s := range []core.Sealer{nil, sealer(t, "a")} {
		eng := newDoEngine(t, core.Config{Sealer: s})
		runs := 0
		got, _, err := core.Do(context.Background(), eng, "", "twice", func(ctx context.Context) ([]int, error) {
			var out []int
			for range 2 {
				v, err := core.Step(ctx, "count", func(context.Context) (int, error) { runs++; return runs, nil })
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			return out, nil
		})
		if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 1 || runs != 1 {
			t.Errorf("sealed %v: %v, %v, %d runs; want [1 1] and one run", s != nil, got, err, runs)
		}
	}
}
