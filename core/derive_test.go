package core_test

import (
	"context"
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemkey"
)

// derived returns the DerivedKey of label inside Do's fn for scope and key,
// on an Engine of its own: another process, as far as the key can tell.
func derived(t *testing.T, cfg core.Config, scope, key, label string) string {
	t.Helper()
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := core.Do(context.Background(), e, scope, key, func(ctx context.Context) (string, error) {
		k, ok := core.DerivedKey(ctx, label)
		if !ok {
			t.Error("DerivedKey in Do's fn: no key")
		}
		return k, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestDerivedKey(t *testing.T) {
	// The derivation never changes: a provider keeps the keys a release
	// before sent, and a handler run again after an upgrade must repeat them.
	const golden = "ebb8f602-1019-849b-b488-afca1579971c"
	if k := derived(t, core.Config{}, "alice", "k1", "charge"); k != golden {
		t.Fatalf("DerivedKey = %s, want %s", k, golden)
	}
	seen := map[string]bool{}
	for _, c := range [][3]string{{"alice", "k1", "charge"}, {"bob", "k1", "charge"}, {"alice", "k2", "charge"}, {"alice", "k1", "email"}, {"alice", "k1", ""}} {
		k := derived(t, core.Config{}, c[0], c[1], c[2])
		if seen[k] {
			t.Fatalf("%v: key %s seen before", c, k)
		}
		seen[k] = true
		if err := idemkey.UUID(k); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if err := idemkey.Token(k); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	if _, ok := core.DerivedKey(context.Background(), "charge"); ok {
		t.Fatal("DerivedKey without a running key reported one")
	}
}

// Work that runs unprotected (the store failed, fail-open) still sends the
// keys a protected run would.
func TestDerivedKeyUnprotected(t *testing.T) {
	store := &faultyStore{Store: core.NewMemoryStore(0)}
	store.acquires.Store(2) // every Acquire fails
	got := derived(t, core.Config{Store: store, Observer: (&events{}).observe}, "alice", "k1", "charge")
	if want := derived(t, core.Config{}, "alice", "k1", "charge"); got != want {
		t.Fatalf("unprotected: %s, want %s", got, want)
	}
}
