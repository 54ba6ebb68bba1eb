package core

import (
	"container/heap"
	"context"
	"strconv"
	"sync"
	"time"
)

// DefaultMemoryMaxEntries bounds a MemoryStore made with NewMemoryStore(0).
const DefaultMemoryMaxEntries = 100_000

// MemoryStore is a Store in the process's memory: the default, for a single
// instance, for development and for tests. Several instances behind a load
// balancer need a shared store such as the Redis one.
//
// Expired entries are swept on every Acquire from heaps ordered by expiry,
// so the number of entries is bounded by the live keys and no goroutine runs
// in the background; nothing needs closing. A store holding its maximum of
// live keys (NewMemoryStore) makes room for a new key by evicting the record
// that expires soonest (the oldest, for records of one TTL): a retry of that
// key would run its handler again, but retries come early, and refusing new
// keys instead would leave every new request unprotected (a store error is
// served unprotected unless Config.FailClosed). Locks are never evicted: a
// store full of locks answers ErrStoreFull. The entries' size is bounded by
// the Engine's Config.MaxStoredBodyBytes per record (1 MiB by default):
// lower it, or the number of keys, to bound the store's memory more
// tightly.
// MemoryStore implements Waiter: a waiting request wakes up when the lock is
// released, not by polling.
type MemoryStore struct {
	max int
	now func() time.Time

	mu      sync.Mutex
	entries map[string]*memEntry
	locks   expiryHeap // the entries being locked
	records expiryHeap // the entries holding a record
	tokens  uint64
}

type memEntry struct {
	key     string
	record  []byte // nil while locked
	token   string // "" once completed
	expires time.Time
	locked  time.Time     // when the lock was taken; zero for a record
	index   int           // in its heap: locks or records
	waiters chan struct{} // closed when the lock goes; nil until someone waits
}

// NewMemoryStore returns an empty store holding at most maxEntries keys;
// zero or less means DefaultMemoryMaxEntries.
func NewMemoryStore(maxEntries int) *MemoryStore {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryMaxEntries
	}
	return &MemoryStore{max: maxEntries, now: time.Now, entries: make(map[string]*memEntry)}
}

// Len returns the number of live keys, records and locks.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	return len(s.entries)
}

// Acquire implements Store.
func (s *MemoryStore) Acquire(_ context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	if e, ok := s.entries[key]; ok {
		if e.record != nil {
			return e.record, "", nil
		}
		return nil, "", ErrInFlight
	}
	if !s.room() {
		return nil, "", ErrStoreFull
	}
	s.tokens++
	e := &memEntry{key: key, token: strconv.FormatUint(s.tokens, 36), expires: now.Add(lockTTL), locked: now}
	s.entries[key] = e
	heap.Push(&s.locks, e)
	return nil, e.token, nil
}

// Complete implements Store.
func (s *MemoryStore) Complete(_ context.Context, key, token string, record []byte, ttl time.Duration) error {
	if record == nil {
		record = []byte{} // a record, however empty, is not a lock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now) // token's lock, had it expired, is gone now
	e, ok := s.entries[key]
	switch {
	case !ok:
		// The lock expired and nobody took the key: store late, if there
		// is room (if not, the response is lost as with a lock taken over).
		if !s.room() {
			return ErrLockLost
		}
		e = &memEntry{key: key, record: record, expires: now.Add(ttl)}
		s.entries[key] = e
		heap.Push(&s.records, e)
		return nil
	case e.token == "" || e.token != token:
		return ErrLockLost
	}
	heap.Remove(&s.locks, e.index)
	e.record, e.token, e.locked = record, "", time.Time{}
	e.expires = now.Add(ttl)
	heap.Push(&s.records, e)
	e.wake()
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.owned(key, token)
	if err != nil {
		return err
	}
	s.remove(e)
	return nil
}

// Refresh implements Store.
func (s *MemoryStore) Refresh(_ context.Context, key, token string, lockTTL time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.owned(key, token)
	if err != nil {
		return err
	}
	e.expires = s.now().Add(lockTTL)
	heap.Fix(&s.locks, e.index)
	return nil
}

// Wait implements Waiter.
func (s *MemoryStore) Wait(ctx context.Context, key string) error {
	s.mu.Lock()
	e, ok := s.entries[key]
	if !ok || e.record != nil || !s.now().Before(e.expires) {
		s.mu.Unlock()
		return nil
	}
	if e.waiters == nil {
		e.waiters = make(chan struct{})
	}
	ch, expires := e.waiters, e.expires
	s.mu.Unlock()

	// The lock may also expire without anyone releasing it.
	t := time.NewTimer(expires.Sub(s.now()))
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// owned returns the live entry of key if token holds its lock.
func (s *MemoryStore) owned(key, token string) (*memEntry, error) {
	e, ok := s.entries[key]
	if !ok || e.token == "" || e.token != token || !s.now().Before(e.expires) {
		return nil, ErrLockLost
	}
	return e, nil
}

func (s *MemoryStore) remove(e *memEntry) {
	if e.token != "" { // a lock; a record has no token
		heap.Remove(&s.locks, e.index)
	} else {
		heap.Remove(&s.records, e.index)
	}
	delete(s.entries, e.key)
	e.wake()
}

// sweep drops every entry that expired by now.
func (s *MemoryStore) sweep(now time.Time) {
	for _, h := range []*expiryHeap{&s.locks, &s.records} {
		for len(*h) > 0 && !now.Before((*h)[0].expires) {
			s.remove((*h)[0])
		}
	}
}

// room makes room for one more key, evicting the record that expires
// soonest if the store is full. It reports false if every key is a lock.
func (s *MemoryStore) room() bool {
	if len(s.entries) < s.max {
		return true
	}
	if len(s.records) == 0 {
		return false
	}
	s.remove(s.records[0])
	return true
}

func (e *memEntry) wake() {
	if e.waiters != nil {
		close(e.waiters)
		e.waiters = nil
	}
}

// expiryHeap orders entries by expiry, soonest first (container/heap).
type expiryHeap []*memEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*memEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
