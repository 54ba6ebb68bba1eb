package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

func newDoEngine(t *testing.T, cfg core.Config) *core.Engine {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = core.NewMemoryStore(0)
	}
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestDoCodec(t *testing.T) {
	e := newDoEngine(t, core.Config{})
	var encoded []byte
	opts := core.DoOptions{
		Marshal: func(v any) ([]byte, error) {
			encoded = []byte(strconv.Itoa(v.(int)) + "!")
			return encoded, nil
		},
		Unmarshal: func(b []byte, v any) error {
			n, err := strconv.Atoi(string(bytes.TrimSuffix(b, []byte("!"))))
			*v.(*int) = n
			return err
		},
	}
	fn := func(context.Context) (int, error) { return 7, nil }
	for _, want := range []bool{false, true} {
		got, replayed, err := core.Do(context.Background(), e, "s", "k", fn, opts)
		if got != 7 || replayed != want || err != nil {
			t.Fatalf("Do = %d, %v, %v", got, replayed, err)
		}
	}
	if string(encoded) != "7!" {
		t.Fatalf("Marshal not used: %q", encoded)
	}
}

func TestDoContextCarriesKey(t *testing.T) {
	e := newDoEngine(t, core.Config{})
	_, _, err := core.Do(context.Background(), e, "scope", "key", func(ctx context.Context) (string, error) {
		info, ok := core.InfoFromContext(ctx)
		if !ok || info.Key != "key" || info.Scope != "scope" {
			t.Errorf("InfoFromContext in fn = %+v, %v", info, ok)
		}
		return "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Do(context.Background(), e, "scope", "", func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, core.ErrInvalidKey) {
		t.Fatalf("empty key: %v, want ErrInvalidKey", err)
	}
}

func TestDoPanicReleases(t *testing.T) {
	e := newDoEngine(t, core.Config{})
	func() {
		defer func() { recover() }() //nolint:errcheck // the panic is the test's
		core.Do(context.Background(), e, "s", "k", func(context.Context) (int, error) { panic("boom") })
	}()
	got, replayed, err := core.Do(context.Background(), e, "s", "k", func(context.Context) (int, error) { return 1, nil })
	if got != 1 || replayed || err != nil {
		t.Fatalf("after a panic: %d, %v, %v; want a run", got, replayed, err)
	}
}

// A result too large to store (or that does not encode) is returned once,
// and later calls get an error saying so, replayed: fn ran, and running it
// again is what Do is for avoiding.
func TestDoResultNotStorable(t *testing.T) {
	for name, opts := range map[string]core.DoOptions{
		"too large":       {},
		"does not encode": {Marshal: func(any) ([]byte, error) { return nil, errors.New("no encoding") }},
	} {
		e := newDoEngine(t, core.Config{MaxStoredBodyBytes: 64})
		runs := 0
		fn := func(context.Context) (string, error) { runs++; return strings.Repeat("x", 100), nil }
		if got, replayed, err := core.Do(context.Background(), e, "s", "k", fn, opts); err != nil || replayed || len(got) != 100 {
			t.Fatalf("%s: first Do = %q, %v, %v; want the result", name, got, replayed, err)
		}
		got, replayed, err := core.Do(context.Background(), e, "s", "k", fn, opts)
		if err == nil || !replayed || got != "" || !strings.HasPrefix(err.Error(), "idem: Do's result") {
			t.Fatalf("%s: second Do = %q, %v, %v; want the stored error, replayed", name, got, replayed, err)
		}
		if runs != 1 {
			t.Fatalf("%s: fn ran %d times; want once", name, runs)
		}
	}
}

// A permanent error's message over MaxStoredBodyBytes is stored cut to
// that many bytes, not as its hash (the replay used to be an error with an
// empty message), and not in the middle of a character; its other bytes
// stay as they were.
func TestDoPermanentMessageTooLong(t *testing.T) {
	e := newDoEngine(t, core.Config{MaxStoredBodyBytes: 13})
	for i, tc := range []struct{ msg, want string }{
		{"card declined: insufficient funds", "card declined"},
		{"code \xff: declined, insufficient funds", "code \xff: decli"},
		{"€€€€€ declined", "€€€€"},
	} {
		key := fmt.Sprint("k", i)
		fn := func(context.Context) (int, error) { return 0, core.Permanent(errors.New(tc.msg)) }
		if _, _, err := core.Do(context.Background(), e, "s", key, fn); err == nil || err.Error() != tc.msg {
			t.Fatalf("first call: %v; want the whole error", err)
		}
		_, replayed, err := core.Do(context.Background(), e, "s", key, func(context.Context) (int, error) { t.Error("ran again"); return 0, nil })
		if !replayed || err == nil || err.Error() != tc.want {
			t.Errorf("replay of %q: %v, %q; want %q", tc.msg, replayed, err, tc.want)
		}
	}
}

func TestDoFailClosed(t *testing.T) {
	store := &faultyStore{Store: core.NewMemoryStore(0)}
	store.acquires.Store(2) // every Acquire fails
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return 1, nil }
	e := newDoEngine(t, core.Config{Store: store, FailClosed: true, Observer: (&events{}).observe})
	if _, _, err := core.Do(context.Background(), e, "s", "k", fn); !errors.Is(err, core.ErrStoreUnavailable) || runs != 0 {
		t.Fatalf("fail-closed: err %v, runs %d", err, runs)
	}
	e = newDoEngine(t, core.Config{Store: store, Observer: (&events{}).observe})
	if got, replayed, err := core.Do(context.Background(), e, "s", "k", fn); got != 1 || replayed || err != nil || runs != 1 {
		t.Fatalf("fail-open: %d, %v, %v, runs %d; want an unprotected run", got, replayed, err, runs)
	}
}

func TestDoRefusesOtherRecords(t *testing.T) {
	e := newDoEngine(t, core.Config{Observer: (&events{}).observe})
	if _, err := e.Once(context.Background(), "s", "k", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Once's record is no result of Do: refused, fail-open or not, since
	// the key was used and running fn could run it twice.
	runs := 0
	_, replayed, err := core.Do(context.Background(), e, "s", "k", func(context.Context) (int, error) { runs++; return 5, nil })
	if !errors.Is(err, core.ErrStoreUnavailable) || !errors.Is(err, core.ErrCorruptRecord) || replayed || runs != 0 {
		t.Fatalf("Do over Once's record: %v, %v, runs %d; want ErrStoreUnavailable, no run", replayed, err, runs)
	}
}

// A result that does not decode into T (the key used with another type) is
// a corrupt record: one store error reported, no replay, and the zero T.
func TestDoResultOfAnotherType(t *testing.T) {
	var ev events
	e := newDoEngine(t, core.Config{Observer: ev.observe})
	ctx := context.Background()
	if _, _, err := core.Do(ctx, e, "s", "k", func(context.Context) (string, error) { return "five", nil }); err != nil {
		t.Fatal(err)
	}
	got, replayed, err := core.Do(ctx, e, "s", "k", func(context.Context) (int, error) { return 5, nil })
	if !errors.Is(err, core.ErrStoreUnavailable) || !errors.Is(err, core.ErrCorruptRecord) || replayed || got != 0 {
		t.Fatalf("Do[int] over Do[string]'s result: %d, %v, %v; want 0, ErrStoreUnavailable wrapping ErrCorruptRecord", got, replayed, err)
	}
	if ev.count(core.OutcomeReplay) != 0 || ev.count(core.OutcomeStoreError) != 1 {
		t.Fatalf("events %v: want one store error and no replay", ev.all)
	}
}

// A record that does not open (a sealing key this instance lacks) is never
// a reason to run the work unprotected, even fail-open.
func TestUnopenableRecordNotRunAgain(t *testing.T) {
	store := core.NewMemoryStore(0)
	e := newDoEngine(t, core.Config{Store: store, Observer: (&events{}).observe})
	ctx := context.Background()
	if _, _, err := core.Do(ctx, e, "s", "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	// The record is overwritten with bytes that do not decode.
	id := core.ID("s", "k", "")
	if err := store.Purge(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, token, err := store.Acquire(ctx, id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, id, token, []byte("not a record"), time.Hour); err != nil {
		t.Fatal(err)
	}
	runs := 0
	_, _, err = core.Do(ctx, e, "s", "k", func(context.Context) (int, error) { runs++; return 2, nil })
	if !errors.Is(err, core.ErrStoreUnavailable) || runs != 0 {
		t.Fatalf("over a corrupt record: %v, runs %d; want ErrStoreUnavailable, no run", err, runs)
	}
}

// Once and Do label their events with no route (a scope per tenant would
// make metric labels without bound), while Config.ScopeRoute still joins
// their scope to the store key, as it did when the scope was their route.
func TestOnceAndDoRoute(t *testing.T) {
	store := core.NewMemoryStore(0)
	var routes []string
	eng := newDoEngine(t, core.Config{Store: store, ScopeRoute: true, Observer: func(ev core.Event) { routes = append(routes, ev.Route) }})
	ctx := context.Background()
	if ran, err := eng.Once(ctx, "tenant-7", "event-1", func(context.Context) error { return nil }); !ran || err != nil {
		t.Fatalf("Once = %v, %v", ran, err)
	}
	if _, _, err := core.Do(ctx, eng, "tenant-7", "call-1", func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"event-1", "call-1"} {
		if _, err := store.Inspect(ctx, core.ID("tenant-7", key, "tenant-7")); err != nil {
			t.Errorf("%s under ID(scope, key, scope): %v", key, err)
		}
	}
	for _, r := range routes {
		if r != "" {
			t.Fatalf("event routes %q, want none", routes)
		}
	}
}

// watchedTxStore counts the transactions of an idemtest.TxStore that were
// rolled back.
type watchedTxStore struct {
	*idemtest.TxStore
	rollbacks atomic.Int32
}

type watchedTx struct {
	core.Tx
	s *watchedTxStore
}

func (s *watchedTxStore) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	rec, tx, err := s.TxStore.Begin(ctx, key, idle)
	if tx != nil {
		tx = watchedTx{tx, s}
	}
	return rec, tx, err
}

func (t watchedTx) Rollback(ctx context.Context) error {
	t.s.rollbacks.Add(1)
	return t.Tx.Rollback(ctx)
}

// With a TxStore, a result Do cannot store (over MaxStoredBodyBytes, or
// that does not encode) commits fn's writes with the error stored in its
// place, as a permanent error does: the result is returned, a retry gets
// the error.
func TestDoTxResultNotStorable(t *testing.T) {
	for name, opts := range map[string]core.DoOptions{
		"too large":       {},
		"does not encode": {Marshal: func(any) ([]byte, error) { return nil, errors.New("no encoding") }},
	} {
		store := &watchedTxStore{TxStore: idemtest.NewTxStore(t).(*idemtest.TxStore)}
		e := newDoEngine(t, core.Config{Store: store, MaxStoredBodyBytes: 64})
		fn := func(ctx context.Context) (string, error) {
			if !idemtest.InTx(ctx) {
				t.Errorf("%s: fn runs without the key's transaction", name)
			}
			return strings.Repeat("x", 100), nil
		}
		got, _, err := core.Do(context.Background(), e, "s", "k", fn, opts)
		if n := store.rollbacks.Load(); n != 0 || err != nil || len(got) != 100 {
			t.Errorf("%s: Do = %q, %v after %d rollbacks; want the result, committed", name, got, err, n)
		}
		if _, replayed, err := core.Do(context.Background(), e, "s", "k", fn, opts); err == nil || !replayed {
			t.Errorf("%s: retry = %v, replayed %v; want the stored error", name, err, replayed)
		}
	}
}

// labeled is an interface result: JSON encodes the value it holds, and
// cannot decode into the interface.
type labeled interface{ Label() string }

type label string

func (l label) Label() string { return string(l) }

// A result that encodes but does not decode into T (an interface, a
// MarshalJSON without its UnmarshalJSON) would make every later call a
// corrupt record, for the key's TTL, after the first one succeeded: it is
// stored as a permanent error saying so, as one that does not encode is.
func TestDoResultNotDecodable(t *testing.T) {
	e := newDoEngine(t, core.Config{})
	runs := 0
	fn := func(context.Context) (labeled, error) { runs++; return label("re_1"), nil }
	if got, replayed, err := core.Do(context.Background(), e, "s", "k", fn); err != nil || replayed || got.Label() != "re_1" {
		t.Fatalf("first Do = %v, %v, %v; want the result", got, replayed, err)
	}
	got, replayed, err := core.Do(context.Background(), e, "s", "k", fn)
	if err == nil || !replayed || got != nil || !strings.HasPrefix(err.Error(), "idem: Do's result does not decode") || errors.Is(err, core.ErrStoreUnavailable) {
		t.Fatalf("second Do = %v, %v, %v; want the stored error, replayed", got, replayed, err)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times; want once", runs)
	}
}

// A TTL written as a bare number is nanoseconds: refused, fn not run.
func TestDoRefusesTinyTTL(t *testing.T) {
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return 1, nil }
	if _, _, err := core.Do(context.Background(), eng, "s", "k", fn, core.DoOptions{TTL: 86400}); err == nil || runs != 0 {
		t.Fatalf("error %v after %d runs, want a refusal without a run", err, runs)
	}
}
