package core

import (
	"context"
	"errors"
	"time"
)

// Errors a Store returns. Stores wrap them with %w when they add detail.
var (
	// ErrInFlight reports that another request holds the lock of the key.
	ErrInFlight = errors.New("idem: key in flight")
	// ErrLockLost reports that the lock token no longer owns the key: the lock
	// expired (Release, Refresh), or another request took the key after it
	// expired (Complete, which stores late when nobody did).
	ErrLockLost = errors.New("idem: lock lost")
	// ErrStoreFull reports that a bounded store has no room for another key.
	// The Engine refuses the call, as with ErrStoreBusy, whatever
	// Config.FailClosed says.
	ErrStoreFull = errors.New("idem: store full")
	// ErrStoreBusy reports that a working store has no capacity for the key
	// now: pgstore's transactional mode with every connection holding a key.
	// The Engine refuses the call (HTTP 503, Retry-After) whatever
	// Config.FailClosed says, and its breaker does not count it.
	ErrStoreBusy = errors.New("idem: store busy")
)

// Store keeps idempotency records and the locks that guard them.
//
// A key is an opaque string chosen by the Engine: it already combines the
// scope, the client's key and (optionally) the route, and it holds only the
// characters [0-9a-f]. A record is an opaque byte slice encoded by the Engine
// (see Record); a store keeps it as is, and may keep the slice itself: the
// caller does not modify it after. The interface uses standard types only
// so a store package need not import anything but this contract.
//
// Every method must be safe for concurrent use, and Acquire must be atomic
// across every process that shares the store: that is what makes a handler
// run once.
type Store interface {
	// Acquire returns the completed record of key if there is one.
	// Otherwise it takes the key's lock for lockTTL and returns a new owner
	// token. If another request holds the lock it returns ErrInFlight.
	Acquire(ctx context.Context, key string, lockTTL time.Duration) (record []byte, token string, err error)
	// Complete stores record under key for ttl and releases the lock, if
	// token still owns the lock, or if the key has neither a lock nor a
	// record: token's lock expired and no other request took the key, so
	// the handler ran once and storing its response late keeps a retry from
	// running it again. Otherwise (another request holds the lock or stored
	// a record) it returns ErrLockLost and changes nothing.
	Complete(ctx context.Context, key, token string, record []byte, ttl time.Duration) error
	// Release drops the lock of key if token owns it, without storing anything,
	// so that a retry may run the handler. It returns ErrLockLost if token does
	// not own the lock.
	Release(ctx context.Context, key, token string) error
	// Refresh extends the lock of key to lockTTL from now if token owns it;
	// otherwise it returns ErrLockLost. It is called from a timer, with a
	// context of its own that carries none of the request's values.
	Refresh(ctx context.Context, key, token string, lockTTL time.Duration) error
}

// Waiter is implemented by stores that can tell a waiting request when a
// lock is released, instead of the Engine polling Acquire. Wait returns
// when the lock of key is released or expires (it need not tell which), or
// with ctx's error when ctx is done first.
type Waiter interface {
	Wait(ctx context.Context, key string) error
}

// find returns s, or the first store s wraps, that is a T. A store that
// wraps another says so with an Unwrap() Store method (metrics wrappers
// do).
func find[T any](s Store) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}

// notifier is implemented by stores that report events of their own, such
// as a Tiered store's fallbacks: New hands them the Engine's Observer, also
// through stores that wrap another. The last Engine made with a store gets
// its events.
type notifier interface {
	SetObserver(func(Event))
}

// TxStore is implemented by stores that hold a key in a transaction of the
// application's own database (pgstore.NewTx): the work writes through the
// transaction, and its record commits with it, or nothing does. The Engine
// then calls Begin instead of Acquire, Refresh and Release.
type TxStore interface {
	Store
	// Begin returns the completed record of key if there is one. Otherwise
	// it opens a transaction that holds key until it ends, idle for at most
	// idle between two statements, and returns it; ErrInFlight if another
	// transaction holds key. ctx bounds Begin only: it is cancelled when
	// Begin returns, so the transaction must not end with it
	// (context.WithoutCancel for a driver such as database/sql's BeginTx).
	Begin(ctx context.Context, key string, idle time.Duration) (record []byte, tx Tx, err error)
}

// Tx is a key held by an open transaction (TxStore.Begin).
type Tx interface {
	// Context returns a copy of ctx that carries the transaction, for the
	// work to write through.
	Context(ctx context.Context) context.Context
	// Commit stores record under the key for ttl and commits: the work's
	// writes and the record, or neither. failed reports that record
	// answers with a failure (an HTTP status of 400 or more, a code other
	// than 0 of gRPC or another Call.Transport, an error of Do). If a
	// statement of the work failed and aborted the transaction, Commit
	// rolls the work's writes back and commits the record alone when
	// failed (the answer says nothing was done); otherwise it rolls back
	// and returns an error: the answer would announce writes that are lost.
	Commit(ctx context.Context, record []byte, ttl time.Duration, failed bool) error
	// Rollback ends the transaction; nothing it wrote is kept.
	Rollback(ctx context.Context) error
}

// Checkpointer is implemented by stores that keep the checkpoints of Step:
// results by step name under a key, written under the key's lock. They
// outlive the lock (Release, its expiry), so that the work run again by a
// retry finds them, and go when their ttl ends or when Complete stores the
// key's record. Without it, Step fails.
type Checkpointer interface {
	// SaveStep stores result as the checkpoint of step under key for ttl
	// if token owns the key's live lock; otherwise it returns ErrLockLost
	// and changes nothing.
	SaveStep(ctx context.Context, key, token, step string, result []byte, ttl time.Duration) error
	// LoadSteps returns the live checkpoints of key by step name.
	LoadSteps(ctx context.Context, key string) (map[string][]byte, error)
}

// StepTx is implemented by a Tx whose store keeps Step's checkpoints in
// the transactional mode: each step runs in a transaction of its own, which
// commits the step's writes with its checkpoint, so that both outlive a
// crash of the work's transaction. The store's LoadSteps (Checkpointer)
// reads them.
type StepTx interface {
	// RunStep runs fn in a new transaction, carried by fn's context as
	// Tx.Context carries the Tx, and commits it with fn's result as the
	// checkpoint of step, kept for ttl, if the Tx still holds the key;
	// otherwise it rolls back and returns ErrLockLost. An error of fn rolls
	// it back and is returned as is.
	RunStep(ctx context.Context, step string, ttl time.Duration, fn func(context.Context) ([]byte, error)) ([]byte, error)
}
