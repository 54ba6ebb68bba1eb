package idemtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// TestStore runs the store conformance suite. newStore is called once per
// subtest; the stores it returns may share one backend (a shared Redis, say):
// every subtest uses keys of its own, random hex like the Engine's. opts say
// how time passes for the store (FakeTime, Advance).
func TestStore(t *testing.T, newStore func(t *testing.T) core.Store, opts ...Option) {
	t.Helper()
	o := newOptions(opts)
	tests := []struct {
		name string
		fn   func(t *testing.T, s core.Store, o *options)
	}{
		{"AcquireLocks", testAcquireLocks},
		{"CompleteStoresRecord", testCompleteStoresRecord},
		{"ReleaseLetsRetry", testReleaseLetsRetry},
		{"WrongTokenChangesNothing", testWrongToken},
		{"RefreshKeepsLock", testRefreshKeepsLock},
		{"ExpiredLockIsTakenOverAndFenced", testExpiredLockFenced},
		{"ExpiredLockNotTakenOverCompletesLate", testExpiredLockCompletesLate},
		{"RecordExpires", testRecordExpires},
		{"KeysAreIndependent", testKeysIndependent},
		{"BinaryAndLargeRecords", testBinaryRecords},
		{"ConcurrentAcquire", testConcurrentAcquire},
		{"Wait", testWait},
		{"StepsCheckpoint", testStepsCheckpoint},
		{"StepsFenced", testStepsFenced},
		{"StepsResumeAfterLockExpired", testStepsResume},
		{"StepsExpire", testStepsExpire},
		{"StepsDroppedOnComplete", testStepsDroppedOnComplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o.run(t, func(t *testing.T) { tt.fn(t, newStore(t), o) })
		})
	}
}

// Key returns a fresh store key in the Engine's format (64 hex digits).
func Key(t testing.TB) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func acquire(t *testing.T, s core.Store, key string, ttl time.Duration) ([]byte, string) {
	t.Helper()
	rec, token, err := s.Acquire(context.Background(), key, ttl)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return rec, token
}

func mustLock(t *testing.T, s core.Store, key string, ttl time.Duration) string {
	t.Helper()
	rec, token := acquire(t, s, key, ttl)
	if rec != nil || token == "" {
		t.Fatalf("Acquire of a free key = (%q, %q), want a token and no record", rec, token)
	}
	return token
}

func wantInFlight(t *testing.T, s core.Store, key string) {
	t.Helper()
	rec, token, err := s.Acquire(context.Background(), key, time.Minute)
	if !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("Acquire of a locked key = (%q, %q, %v), want ErrInFlight", rec, token, err)
	}
}

func wantRecord(t *testing.T, s core.Store, key string, want []byte) {
	t.Helper()
	rec, token := acquire(t, s, key, time.Minute)
	if token != "" || !bytes.Equal(rec, want) {
		t.Fatalf("Acquire of a completed key = (%q, %q), want record %q and no token", rec, token, want)
	}
}

func wantLockLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, core.ErrLockLost) {
		t.Fatalf("%s: err = %v, want ErrLockLost", what, err)
	}
}

func testAcquireLocks(t *testing.T, s core.Store, _ *options) {
	key := Key(t)
	mustLock(t, s, key, time.Minute)
	wantInFlight(t, s, key)
	wantInFlight(t, s, key)
}

func testCompleteStoresRecord(t *testing.T, s core.Store, _ *options) {
	ctx := context.Background()
	key := Key(t)
	token := mustLock(t, s, key, time.Minute)
	if err := s.Complete(ctx, key, token, []byte("record"), time.Minute); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	wantRecord(t, s, key, []byte("record"))
	// The lock is gone with the completion: the token owns nothing now.
	wantLockLost(t, "Refresh after Complete", s.Refresh(ctx, key, token, time.Minute))
	wantLockLost(t, "Release after Complete", s.Release(ctx, key, token))
	wantLockLost(t, "Complete twice", s.Complete(ctx, key, token, []byte("other"), time.Minute))
	wantRecord(t, s, key, []byte("record"))
}

func testReleaseLetsRetry(t *testing.T, s core.Store, _ *options) {
	ctx := context.Background()
	key := Key(t)
	first := mustLock(t, s, key, time.Minute)
	if err := s.Release(ctx, key, first); err != nil {
		t.Fatalf("Release: %v", err)
	}
	second := mustLock(t, s, key, time.Minute)
	if second == first {
		t.Fatalf("second lock reused token %q", first)
	}
	wantLockLost(t, "Complete with the released token", s.Complete(ctx, key, first, []byte("late"), time.Minute))
	wantInFlight(t, s, key)
}

func testWrongToken(t *testing.T, s core.Store, _ *options) {
	ctx := context.Background()
	key := Key(t)
	token := mustLock(t, s, key, time.Minute)
	wantLockLost(t, "Complete with a wrong token", s.Complete(ctx, key, token+"x", []byte("x"), time.Minute))
	wantLockLost(t, "Release with a wrong token", s.Release(ctx, key, token+"x"))
	wantLockLost(t, "Refresh with a wrong token", s.Refresh(ctx, key, token+"x", time.Minute))
	wantInFlight(t, s, key)
	if err := s.Complete(ctx, key, token, []byte("ok"), time.Minute); err != nil {
		t.Fatalf("Complete with the right token after wrong ones: %v", err)
	}
	wantRecord(t, s, key, []byte("ok"))
	other := Key(t)
	wantLockLost(t, "Release of a key never locked", s.Release(ctx, other, token))
}

func testRefreshKeepsLock(t *testing.T, s core.Store, o *options) {
	ctx := context.Background()
	key := Key(t)
	token := mustLock(t, s, key, 300*time.Millisecond)
	if err := s.Refresh(ctx, key, token, 10*time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	o.pass(t, 600*time.Millisecond) // past the first TTL, well within the refreshed one
	wantInFlight(t, s, key)
	if err := s.Complete(ctx, key, token, []byte("slow"), time.Minute); err != nil {
		t.Fatalf("Complete after a refresh: %v", err)
	}
	wantRecord(t, s, key, []byte("slow"))
}

func testExpiredLockFenced(t *testing.T, s core.Store, o *options) {
	ctx := context.Background()
	key := Key(t)
	stale := mustLock(t, s, key, 200*time.Millisecond)
	o.pass(t, 500*time.Millisecond)
	fresh := mustLock(t, s, key, time.Minute) // the expired lock is free again
	wantLockLost(t, "Refresh of an expired lock", s.Refresh(ctx, key, stale, time.Minute))
	wantLockLost(t, "late Complete", s.Complete(ctx, key, stale, []byte("stale"), time.Minute))
	wantLockLost(t, "late Release", s.Release(ctx, key, stale))
	wantInFlight(t, s, key) // the late calls did not drop the new lock
	if err := s.Complete(ctx, key, fresh, []byte("fresh"), time.Minute); err != nil {
		t.Fatalf("Complete by the new owner: %v", err)
	}
	wantLockLost(t, "late Complete after the new owner's", s.Complete(ctx, key, stale, []byte("stale"), time.Minute))
	wantRecord(t, s, key, []byte("fresh"))
}

// testExpiredLockCompletesLate: a lock that expired with no other request
// taking the key (a long pause, refreshes failing) still stores its
// response, so a retry gets the replay instead of running the handler again.
func testExpiredLockCompletesLate(t *testing.T, s core.Store, o *options) {
	ctx := context.Background()
	key := Key(t)
	stale := mustLock(t, s, key, 200*time.Millisecond)
	o.pass(t, 500*time.Millisecond)
	wantLockLost(t, "Refresh of an expired lock", s.Refresh(ctx, key, stale, time.Minute))
	if err := s.Complete(ctx, key, stale, []byte("late"), time.Minute); err != nil {
		t.Fatalf("Complete of an expired lock nobody took: %v", err)
	}
	wantRecord(t, s, key, []byte("late"))
	wantLockLost(t, "Release after the late Complete", s.Release(ctx, key, stale))
	wantRecord(t, s, key, []byte("late"))
}

func testRecordExpires(t *testing.T, s core.Store, o *options) {
	ctx := context.Background()
	key := Key(t)
	token := mustLock(t, s, key, time.Minute)
	if err := s.Complete(ctx, key, token, []byte("short"), 200*time.Millisecond); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	wantRecord(t, s, key, []byte("short"))
	o.pass(t, 500*time.Millisecond)
	mustLock(t, s, key, time.Minute)
}

func testKeysIndependent(t *testing.T, s core.Store, _ *options) {
	ctx := context.Background()
	a, b := Key(t), Key(t)
	ta := mustLock(t, s, a, time.Minute)
	tb := mustLock(t, s, b, time.Minute)
	if err := s.Complete(ctx, a, ta, []byte("a"), time.Minute); err != nil {
		t.Fatal(err)
	}
	wantInFlight(t, s, b)
	if err := s.Release(ctx, b, tb); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, s, a, []byte("a"))
	mustLock(t, s, b, time.Minute)
}

func testBinaryRecords(t *testing.T, s core.Store, _ *options) {
	ctx := context.Background()
	records := [][]byte{
		{0, 1, 2, 0xff, 0, '\n', '\r'},
		bytes.Repeat([]byte{0xab, 0, 0xcd}, 1<<20/3+1), // just over 1 MiB
	}
	for _, rec := range records {
		key := Key(t)
		token := mustLock(t, s, key, time.Minute)
		if err := s.Complete(ctx, key, token, rec, time.Minute); err != nil {
			t.Fatalf("Complete of %d bytes: %v", len(rec), err)
		}
		wantRecord(t, s, key, rec)
	}
}

func testConcurrentAcquire(t *testing.T, s core.Store, _ *options) {
	const n = 100
	key := Key(t)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		tokens   []string
		inFlight int
	)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, token, err := s.Acquire(context.Background(), key, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, core.ErrInFlight):
				inFlight++
			case err != nil:
				t.Errorf("Acquire: %v", err)
			default:
				tokens = append(tokens, token)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(tokens) != 1 || inFlight != n-1 {
		t.Fatalf("%d concurrent Acquires: %d locks, %d in flight; want 1 and %d", n, len(tokens), inFlight, n-1)
	}
}

func testWait(t *testing.T, s core.Store, o *options) {
	w, ok := s.(core.Waiter)
	if !ok {
		t.Skip("store does not implement core.Waiter; the Engine polls")
	}
	ctx := context.Background()
	key := Key(t)
	// A free key: Wait returns at once.
	bounded, cancelBounded := context.WithTimeout(ctx, 10*time.Second)
	defer cancelBounded()
	if err := w.Wait(bounded, key); err != nil {
		t.Fatalf("Wait on a free key: %v", err)
	}
	token := mustLock(t, s, key, time.Minute)
	// A held lock: Wait gives up with the context.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := w.Wait(short, key); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a held lock = %v, want context.DeadlineExceeded", err)
	}
	// Completion wakes a waiter.
	wakes(t, w, key, "Complete", func() {
		if err := s.Complete(ctx, key, token, []byte("done"), time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	wantRecord(t, s, key, []byte("done"))
	// So does a release.
	key = Key(t)
	token = mustLock(t, s, key, time.Minute)
	wakes(t, w, key, "Release", func() {
		if err := s.Release(ctx, key, token); err != nil {
			t.Fatal(err)
		}
	})
	// And a lock that expires, which nobody releases.
	key = Key(t)
	mustLock(t, s, key, 500*time.Millisecond)
	wakes(t, w, key, "the lock's expiry", func() { o.pass(t, 500*time.Millisecond) })
}

// wakes checks that a Wait on key, blocked while its lock is held, returns
// once wake has run. A Wait that has not started blocking after 50 ms only
// makes the check weaker, never wrong.
func wakes(t *testing.T, w core.Waiter, key, what string, wake func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.Wait(context.Background(), key) }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned while the lock was held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait after %s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Wait did not return after %s", what)
	}
}
