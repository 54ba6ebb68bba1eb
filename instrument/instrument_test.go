package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/instrument"
)

type opLog struct {
	mu   sync.Mutex
	ops  []string
	held int
}

func (l *opLog) observe(_ context.Context, op instrument.Op, _ time.Duration, err error, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	name := op.String()
	if err != nil {
		name += "!"
	}
	l.ops = append(l.ops, name)
	l.held += held
}

func TestInstrumentStore(t *testing.T) {
	var log opLog
	s := instrument.Store(core.NewMemoryStore(0), log.observe)
	if _, ok := s.(core.Waiter); !ok {
		t.Fatal("the memory store's Waiter was not passed through")
	}
	if _, ok := s.(core.Admin); !ok {
		t.Fatal("the memory store's Admin was not passed through")
	}
	ctx := context.Background()
	_, tok, _ := s.Acquire(ctx, "k", time.Minute)
	s.Acquire(ctx, "k", time.Minute)      //nolint:errcheck // in flight
	s.Refresh(ctx, "k", tok, time.Minute) //nolint:errcheck
	if log.held != 1 {
		t.Fatalf("held %d with one lock taken", log.held)
	}
	s.Complete(ctx, "k", tok, []byte("r"), time.Minute) //nolint:errcheck
	s.Release(ctx, "k", tok)                            //nolint:errcheck // a second end counts nothing
	want := []string{"acquire", "acquire!", "refresh", "complete", "release!"}
	if len(log.ops) != len(want) || log.held != 0 {
		t.Fatalf("ops %v, held %d; want %v, 0", log.ops, log.held, want)
	}
	for i := range want {
		if log.ops[i] != want[i] {
			t.Fatalf("ops %v, want %v", log.ops, want)
		}
	}
	idemtest.TestStore(t, func(*testing.T) core.Store { return instrument.Store(core.NewMemoryStore(0), (&opLog{}).observe) }, idemtest.FakeTime())
	idemtest.TestAdmin(t, func(*testing.T) core.Store { return instrument.Store(core.NewMemoryStore(0), (&opLog{}).observe) }, idemtest.FakeTime())
	idemtest.TestQuota(t, func(*testing.T) core.Store { return instrument.Store(core.NewMemoryStore(0), (&opLog{}).observe) }, idemtest.FakeTime())
}

// A TxStore keeps its Waiter and Admin behind the instrumentation.
func TestInstrumentTxStoreCapabilities(t *testing.T) {
	s := instrument.Store(idemtest.NewTxStore(t), func(context.Context, instrument.Op, time.Duration, error, int) {})
	if _, ok := s.(core.TxStore); !ok {
		t.Fatal("not a TxStore")
	}
	if _, ok := s.(core.Waiter); !ok {
		t.Fatal("the TxStore's Waiter was not passed through")
	}
	if _, ok := s.(core.Admin); !ok {
		t.Fatal("the TxStore's Admin was not passed through")
	}
}

// TestFailed: a key in flight, a lost lock and a key over the quota, even
// wrapped, are answers of a store that works; anything else is a failure.
func TestFailed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{core.ErrInFlight, false},
		{fmt.Errorf("redis: %w", core.ErrLockLost), false},
		{&core.QuotaError{RetryAfter: time.Second}, false},
		{fmt.Errorf("pgstore: %w", &core.QuotaError{}), false},
		{core.ErrStoreFull, true},
		{context.DeadlineExceeded, true},
		{errors.New("connection refused"), true},
	} {
		if got := instrument.Failed(tt.err); got != tt.want {
			t.Errorf("Failed(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestStoreNilPanics(t *testing.T) {
	for name, call := range map[string]func(){
		"store":    func() { instrument.Store(nil, func(context.Context, instrument.Op, time.Duration, error, int) {}) },
		"observer": func() { instrument.Store(core.NewMemoryStore(0), nil) },
	} {
		func() {
			defer func() {
				if r := recover(); r != "instrument: Store with a nil store or Observer" {
					t.Errorf("nil %s: recovered %v", name, r)
				}
			}()
			call()
		}()
	}
}

// failingSealer cannot seal: its keys are out of reach.
type failingSealer struct{}

func (failingSealer) Seal(context.Context, []byte, []byte) (string, []byte, error) {
	return "", nil, errors.New("keys out of reach")
}

func (failingSealer) Open(context.Context, string, []byte, []byte) ([]byte, error) {
	return nil, errors.New("keys out of reach")
}

// A lock the Engine leaves to expire (a record it could not seal: neither
// Complete nor Release is called) stops counting as held once its TTL has
// passed, reported by the next call: the in-flight gauges of idemprom and
// idemotel used to grow by one for each.
func TestInstrumentLockLeftToExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log opLog
		eng, err := core.New(core.Config{
			Store:    instrument.Store(core.NewMemoryStore(0), log.observe),
			Sealer:   failingSealer{},
			LockTTL:  time.Minute,
			Observer: func(core.Event) {},
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			l, _, err := eng.Acquire(&core.Call{Key: fmt.Sprint("k", i)})
			if err != nil || l == nil {
				t.Fatalf("Acquire: %v, %v", l, err)
			}
			l.Complete(&core.Record{Code: 201}) //nolint:errcheck // the seal fails: left to expire
		}
		if log.held != 3 {
			t.Fatalf("held %d after 3 records that could not be sealed, want 3 (their locks have not expired)", log.held)
		}
		time.Sleep(time.Minute) // fake time: their locks expire
		l, _, err := eng.Acquire(&core.Call{Key: "next"})
		if err != nil || l == nil {
			t.Fatalf("Acquire: %v, %v", l, err)
		}
		if log.held != 1 {
			t.Errorf("held %d after the locks left to expire expired, and one more taken; want 1", log.held)
		}
		l.Release(0, nil)
		if log.held != 0 {
			t.Errorf("held %d at the end, want 0", log.held)
		}
	})
}
