package core

import (
	"context"
	"errors"
	"slices"
	"time"
)

// ErrNotFound reports a key that holds neither a record nor a lock.
var ErrNotFound = errors.New("idem: key not found")

// KeyState is what a store holds under one key, for operators.
type KeyState struct {
	Key string // the store key (ID)
	// Record is the encoded record (DecodeRecord) of a completed key; nil
	// while the key is locked.
	Record []byte
	// LockedAt is when the lock was taken (zero for a record, or when the
	// store cannot tell), and Expires when the lock or the record expires
	// (zero for a lock that ends with its holder, as pgstore's
	// transactional mode's).
	LockedAt time.Time
	Expires  time.Time
}

// Admin is implemented by stores that operators can inspect and repair:
// the idemctl command and the admin handler use it.
type Admin interface {
	// Inspect returns the state of key, or ErrNotFound.
	Inspect(ctx context.Context, key string) (KeyState, error)
	// Purge forgets the record of key, so that a corrected request runs
	// again. It returns ErrInFlight while the key is locked, and
	// ErrNotFound if there is no record.
	Purge(ctx context.Context, key string) error
	// Unlock drops the lock of key, whoever holds it; ErrNotFound if the
	// key is not locked. The request that held it may still store its
	// response (Store.Complete's late store) if no other request took the
	// key meanwhile. A lock that goes with a transaction (pgstore's
	// transactional mode) is not dropped: an error wrapping ErrInFlight
	// says which session holds it.
	Unlock(ctx context.Context, key string) error
	// InFlight lists up to limit locked keys, the oldest first; none if
	// limit is 0 or less.
	InFlight(ctx context.Context, limit int) ([]KeyState, error)
}

// Inspect implements Admin.
func (s *MemoryStore) Inspect(_ context.Context, key string) (KeyState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	e, ok := s.entries[key]
	if !ok {
		return KeyState{}, ErrNotFound
	}
	return e.state(), nil
}

// Purge implements Admin.
func (s *MemoryStore) Purge(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	e, ok := s.entries[key]
	switch {
	case !ok:
		return ErrNotFound
	case e.token != "":
		return ErrInFlight
	}
	s.remove(e)
	for _, drop := range s.invalidate {
		drop(key)
	}
	return nil
}

// Unlock implements Admin.
func (s *MemoryStore) Unlock(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	e, ok := s.entries[key]
	if !ok || e.token == "" {
		return ErrNotFound
	}
	s.remove(e)
	return nil
}

// InFlight implements Admin.
func (s *MemoryStore) InFlight(_ context.Context, limit int) ([]KeyState, error) {
	if limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	out := make([]KeyState, 0, min(limit, len(s.locks)))
	for _, e := range s.locks {
		out = append(out, e.state())
	}
	slices.SortFunc(out, func(a, b KeyState) int { return a.LockedAt.Compare(b.LockedAt) })
	return out[:min(limit, len(out))], nil
}

func (e *memEntry) state() KeyState {
	return KeyState{Key: e.key, Record: e.record, LockedAt: e.locked, Expires: e.expires}
}
