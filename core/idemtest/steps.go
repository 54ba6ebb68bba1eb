package idemtest

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// checkpointer returns s as a core.Checkpointer, looking through stores
// that wrap another as the Engine does, or skips the test.
func checkpointer(t *testing.T, s core.Store) core.Checkpointer {
	t.Helper()
	for st := s; st != nil; {
		if cp, ok := st.(core.Checkpointer); ok {
			return cp
		}
		u, ok := st.(interface{ Unwrap() core.Store })
		if !ok {
			break
		}
		st = u.Unwrap()
	}
	t.Skip("store does not implement core.Checkpointer: core.Step fails on it")
	return nil
}

func saveStep(t *testing.T, cp core.Checkpointer, key, token, step, result string, ttl time.Duration) {
	t.Helper()
	if err := cp.SaveStep(context.Background(), key, token, step, []byte(result), ttl); err != nil {
		t.Fatalf("SaveStep(%s): %v", step, err)
	}
}

// wantSteps checks the checkpoints of key: want is "step=result" pairs.
func wantSteps(t *testing.T, cp core.Checkpointer, key string, want ...string) {
	t.Helper()
	got, err := cp.LoadSteps(context.Background(), key)
	if err != nil {
		t.Fatalf("LoadSteps: %v", err)
	}
	var pairs []string
	for _, step := range slices.Sorted(maps.Keys(got)) {
		pairs = append(pairs, step+"="+string(got[step]))
	}
	slices.Sort(want)
	if !slices.Equal(pairs, want) {
		t.Fatalf("checkpoints %q, want %q", pairs, want)
	}
}

func testStepsCheckpoint(t *testing.T, s core.Store, _ *options) {
	cp := checkpointer(t, s)
	key := Key(t)
	wantSteps(t, cp, key)
	token := mustLock(t, s, key, time.Minute)
	wantSteps(t, cp, key)
	saveStep(t, cp, key, token, "charge", `{"id":"ch_1"}`, time.Minute)
	saveStep(t, cp, key, token, "record", "first", time.Minute)
	saveStep(t, cp, key, token, "record", "second", time.Minute) // written again: the last counts
	binary := string([]byte{0, 0xff, '\n', 0})
	saveStep(t, cp, key, token, "binary", binary, time.Minute)
	saveStep(t, cp, key, token, "empty", "", time.Minute)
	large := strings.Repeat("x", 1<<20)
	saveStep(t, cp, key, token, "large", large, time.Minute)
	got, err := cp.LoadSteps(context.Background(), key)
	if err != nil || !bytes.Equal(got["large"], []byte(large)) {
		t.Fatalf("LoadSteps: %d bytes of the large step, err %v", len(got["large"]), err)
	}
	delete(got, "large")
	wantSteps(t, cp, Key(t)) // another key has none
	if len(got) != 4 || string(got["charge"]) != `{"id":"ch_1"}` || string(got["record"]) != "second" ||
		string(got["binary"]) != binary || got["empty"] == nil && len(got["empty"]) != 0 {
		t.Fatalf("checkpoints %q", got)
	}
	// They outlive the lock: a retry after a release finds them.
	if err := s.Release(context.Background(), key, token); err != nil {
		t.Fatal(err)
	}
	if len(mustLoad(t, cp, key)) != 5 {
		t.Fatal("checkpoints lost with the lock's release")
	}
}

func mustLoad(t *testing.T, cp core.Checkpointer, key string) map[string][]byte {
	t.Helper()
	got, err := cp.LoadSteps(context.Background(), key)
	if err != nil {
		t.Fatalf("LoadSteps: %v", err)
	}
	return got
}

func testStepsFenced(t *testing.T, s core.Store, _ *options) {
	cp := checkpointer(t, s)
	ctx := context.Background()
	key := Key(t)
	wantLockLost(t, "SaveStep of a key never locked", cp.SaveStep(ctx, key, "token", "a", []byte("x"), time.Minute))
	token := mustLock(t, s, key, time.Minute)
	wantLockLost(t, "SaveStep with a wrong token", cp.SaveStep(ctx, key, token+"x", "a", []byte("x"), time.Minute))
	saveStep(t, cp, key, token, "a", "1", time.Minute)
	if err := s.Release(ctx, key, token); err != nil {
		t.Fatal(err)
	}
	wantLockLost(t, "SaveStep after Release", cp.SaveStep(ctx, key, token, "b", []byte("x"), time.Minute))
	next := mustLock(t, s, key, time.Minute)
	wantLockLost(t, "SaveStep with the released token under a new lock", cp.SaveStep(ctx, key, token, "a", []byte("stale"), time.Minute))
	saveStep(t, cp, key, next, "b", "2", time.Minute)
	wantSteps(t, cp, key, "a=1", "b=2")
}

// testStepsResume: the lock expires (the process died); a retry takes the
// key with a new token and finds the checkpoints; the old token writes
// none.
func testStepsResume(t *testing.T, s core.Store, o *options) {
	cp := checkpointer(t, s)
	ctx := context.Background()
	key := Key(t)
	stale := mustLock(t, s, key, 200*time.Millisecond)
	saveStep(t, cp, key, stale, "charge", "ch_1", time.Minute)
	o.pass(t, 500*time.Millisecond)
	wantLockLost(t, "SaveStep of an expired lock", cp.SaveStep(ctx, key, stale, "record", []byte("x"), time.Minute))
	fresh := mustLock(t, s, key, time.Minute)
	wantSteps(t, cp, key, "charge=ch_1")
	wantLockLost(t, "SaveStep of the stale token", cp.SaveStep(ctx, key, stale, "record", []byte("stale"), time.Minute))
	saveStep(t, cp, key, fresh, "record", "r_1", time.Minute)
	wantSteps(t, cp, key, "charge=ch_1", "record=r_1")
}

func testStepsExpire(t *testing.T, s core.Store, o *options) {
	cp := checkpointer(t, s)
	key := Key(t)
	token := mustLock(t, s, key, time.Minute)
	saveStep(t, cp, key, token, "short", "1", 200*time.Millisecond)
	o.pass(t, 500*time.Millisecond)
	wantSteps(t, cp, key)
	// A later save extends the checkpoints of the key.
	saveStep(t, cp, key, token, "a", "1", 200*time.Millisecond)
	saveStep(t, cp, key, token, "b", "2", time.Minute)
	o.pass(t, 500*time.Millisecond)
	if got := mustLoad(t, cp, key); string(got["b"]) != "2" {
		t.Fatalf("checkpoints %q: the one saved for a minute is gone", got)
	}
}

func testStepsDroppedOnComplete(t *testing.T, s core.Store, o *options) {
	cp := checkpointer(t, s)
	ctx := context.Background()
	key := Key(t)
	token := mustLock(t, s, key, time.Minute)
	saveStep(t, cp, key, token, "a", "1", time.Minute)
	wantLockLost(t, "Complete with a wrong token", s.Complete(ctx, key, token+"x", []byte("rec"), time.Minute))
	wantSteps(t, cp, key, "a=1")
	if err := s.Complete(ctx, key, token, []byte("rec"), time.Minute); err != nil {
		t.Fatal(err)
	}
	wantSteps(t, cp, key)
	wantLockLost(t, "SaveStep after Complete", cp.SaveStep(ctx, key, token, "b", []byte("x"), time.Minute))
	wantSteps(t, cp, key)

	// So does a late Complete: the lock expired and nobody took the key.
	key = Key(t)
	token = mustLock(t, s, key, 200*time.Millisecond)
	saveStep(t, cp, key, token, "a", "1", time.Minute)
	o.pass(t, 500*time.Millisecond)
	if err := s.Complete(ctx, key, token, []byte("late"), time.Minute); err != nil {
		t.Fatalf("late Complete: %v", err)
	}
	wantSteps(t, cp, key)
}
