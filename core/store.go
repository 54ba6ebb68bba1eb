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
	ErrStoreFull = errors.New("idem: store full")
)

// Store keeps idempotency records and the locks that guard them.
//
// A key is an opaque string chosen by the Engine: it already combines the
// scope, the client's key and (optionally) the route, and it holds only the
// characters [0-9a-f]. A record is an opaque byte slice encoded by the Engine
// (see Record); a store keeps it as is. The interface uses standard types only
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

// Notifier is implemented by stores that report events of their own, such
// as a Tiered store's fallbacks: New hands them the Engine's Observer. New
// finds it through stores that wrap another and say so with an
// Unwrap() Store method (metrics wrappers do). The last Engine made with a
// store gets its events.
type Notifier interface {
	SetObserver(func(Event))
}
