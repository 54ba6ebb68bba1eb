package core_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

type failingStore struct{ core.Store }

var errDown = errors.New("store down")

func (failingStore) Acquire(context.Context, string, time.Duration) ([]byte, string, error) {
	return nil, "", errDown
}

func TestAcquireStoreFailure(t *testing.T) {
	for _, closed := range []bool{false, true} {
		var got []core.Event
		e, err := core.New(core.Config{Store: failingStore{}, FailClosed: closed, Observer: func(ev core.Event) { got = append(got, ev) }})
		if err != nil {
			t.Fatal(err)
		}
		l, rec, err := e.Acquire(&core.Call{Key: "k", Method: "/svc/M"})
		switch {
		case closed && (!errors.Is(err, core.ErrStoreUnavailable) || !errors.Is(err, errDown) || l != nil):
			t.Fatalf("fail-closed: lease %v, err %v; want ErrStoreUnavailable wrapping the store's error", l, err)
		case !closed && (err != nil || l == nil || l.Protected()):
			t.Fatalf("fail-open: lease %v, err %v; want an unprotected lease", l, err)
		case rec != nil:
			t.Fatalf("record %v on a store failure", rec)
		}
		if l != nil {
			l.Complete(&core.Record{}) // unprotected: no store call, no second event
		}
		if len(got) != 1 || got[0].Outcome != core.OutcomeStoreError || got[0].Method != "/svc/M" || !errors.Is(got[0].Err, errDown) {
			t.Fatalf("events %+v, want one store error", got)
		}
	}
}

func TestOnceStoreFailureClosed(t *testing.T) {
	e, _ := core.New(core.Config{Store: failingStore{}, FailClosed: true})
	ran, err := e.Once(context.Background(), "s", "event-1", func(context.Context) error {
		t.Error("ran with the store down under FailClosed")
		return nil
	})
	if ran || !errors.Is(err, core.ErrStoreUnavailable) {
		t.Fatalf("ran %v, err %v", ran, err)
	}
}

func TestID(t *testing.T) {
	a, b := core.ID("user-1", "k", ""), core.ID("user-2", "k", "")
	if a == b || len(a) != 64 || core.ID("user-1", "k", "/orders") == a {
		t.Fatalf("IDs do not separate scopes and routes: %s %s", a, b)
	}
	// No key can reach into another scope by carrying a separator.
	if core.ID("a", "b\x00c", "") == core.ID("a\x00b", "c", "") {
		t.Fatal("length-prefixed parts collide")
	}
}

// Events carry their transport and its code: the HTTP status for Begin,
// the codes a Call names for Acquire's refusals, none for Once.
func TestEventCodes(t *testing.T) {
	var got []core.Event
	e, err := core.New(core.Config{Observer: func(ev core.Event) { got = append(got, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	call := func(fingerprint byte) *core.Call {
		return &core.Call{Key: "k", Method: "/svc/M", Transport: "rpc", InFlight: 10, Reused: 6, Unavailable: 14,
			Fingerprint: [32]byte{fingerprint}}
	}
	l, _, _ := e.Acquire(call(1))
	e.Acquire(call(1)) //nolint:errcheck // in flight
	l.Complete(&core.Record{Code: 0})
	e.Acquire(call(1))                                                                 //nolint:errcheck // a replay
	e.Acquire(call(2))                                                                 //nolint:errcheck // key reused
	e.Once(context.Background(), "s", "k", func(context.Context) error { return nil }) //nolint:errcheck
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	post(t, h, "h", "{}")
	post(t, h, "h", "{}")
	post(t, h, "", "{}")  // no key: no event
	post(t, h, "h", "[]") // key reused
	want := []struct {
		outcome   core.Outcome
		transport string
		code      int
	}{
		{core.OutcomeConflict, "rpc", 10},
		{core.OutcomeStored, "rpc", 0},
		{core.OutcomeReplay, "rpc", 0},
		{core.OutcomeMismatch, "rpc", 6},
		{core.OutcomeStored, "", 0},
		{core.OutcomeStored, "http", http.StatusCreated},
		{core.OutcomeReplay, "http", http.StatusCreated},
		{core.OutcomeMismatch, "http", http.StatusUnprocessableEntity},
	}
	if len(got) != len(want) {
		t.Fatalf("%d events %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		if ev := got[i]; ev.Outcome != w.outcome || ev.Transport != w.transport || ev.Code != w.code {
			t.Errorf("event %d: %v %q %d, want %v %q %d", i, ev.Outcome, ev.Transport, ev.Code, w.outcome, w.transport, w.code)
		}
	}
}
