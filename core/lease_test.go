package core_test

import (
	"context"
	"errors"
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
