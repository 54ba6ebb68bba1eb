package idemtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// NewTxStore returns a *TxStore on a fresh MemoryStore, for tests of an
// adapter's Buffered flights (core.Flight.Buffered) without a database.
func NewTxStore(*testing.T) core.Store { return &TxStore{MemoryStore: core.NewMemoryStore(0)} }

// TxStore is a core.TxStore in memory: Begin takes the key as Acquire does,
// a transaction's Commit stores the record as Complete does, and Rollback
// releases the key. It has no database for the handler to write to; InTx
// tells whether the handler's context carries its transaction.
type TxStore struct {
	*core.MemoryStore
	fail atomic.Bool
}

var _ core.TxStore = (*TxStore)(nil)

// FailCommits makes the commits of the transactions begun from now on fail
// (and roll back) if fail is true, or succeed.
func (s *TxStore) FailCommits(fail bool) { s.fail.Store(fail) }

// ErrCommit is the error of a commit that FailCommits made fail.
var ErrCommit = errors.New("idemtest: commit fails as asked")

// Begin implements core.TxStore.
func (s *TxStore) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	rec, token, err := s.Acquire(ctx, key, idle)
	if err != nil || token == "" {
		return rec, nil, err
	}
	return nil, &memoryTx{s: s.MemoryStore, key: key, token: token, fail: s.fail.Load()}, nil
}

// InTx reports whether ctx carries a transaction of a TxStore
// (core.Tx.Context), as the context of a handler that runs under one must.
func InTx(ctx context.Context) bool { return ctx.Value(memoryTxKey{}) != nil }

type memoryTxKey struct{}

type memoryTx struct {
	s          *core.MemoryStore
	key, token string
	fail       bool
}

func (t *memoryTx) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, memoryTxKey{}, t)
}

func (t *memoryTx) Commit(ctx context.Context, record []byte, ttl time.Duration, _ bool) error {
	if t.fail {
		t.Rollback(ctx) //nolint:errcheck // failing is the point
		return ErrCommit
	}
	return t.s.Complete(ctx, t.key, t.token, record, ttl)
}

func (t *memoryTx) Rollback(ctx context.Context) error { return t.s.Release(ctx, t.key, t.token) }
