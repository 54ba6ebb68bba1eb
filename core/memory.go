package core

import (
	"bytes"
	"container/heap"
	"context"
	"strconv"
	"sync"
	"time"
)

// defaultMemoryMaxEntries bounds a MemoryStore made with NewMemoryStore(0).
const defaultMemoryMaxEntries = 100_000

// MemoryStore is a Store in the process's memory: the default, for a single
// instance, for development and for tests; several instances need a shared
// store such as redislock's. Nothing needs closing. It never evicts a live
// record: full, it answers a new key with ErrStoreFull, which the Engine
// refuses with 503 whatever Config.FailClosed says (docs/design.md,
// "Memory store").
//
// MemoryStore implements Waiter, Checkpointer, and Invalidator (a purge
// drops the record from the replay caches of the Engines on it). Make one
// with NewMemoryStore; the zero value is not usable.
type MemoryStore struct {
	max int
	now func() time.Time

	mu         sync.Mutex
	invalidate []func(key string) // each Engine's replay cache's
	entries    map[string]*memEntry
	locks      expiryHeap // the entries being locked
	records    expiryHeap // the entries holding a record
	tokens     uint64

	steps     map[string]*memSteps // the checkpoints of a key
	stepsHeap timeHeap[*memSteps]

	scopes  map[string]*memScope // under Config.Quota: by QuotaFromContext's scope
	windows scopeHeap            // the scopes with admissions in their window
}

type memEntry struct {
	key     string
	record  []byte // nil while locked
	token   string // "" once completed
	expires time.Time
	locked  time.Time     // when the lock was taken; zero for a record
	index   int           // in its heap: locks or records
	waiters chan struct{} // closed when the lock goes; nil until someone waits
	scope   *memScope     // the scope its lock counts in (Config.Quota)
}

// memSteps are the checkpoints of a key (MemoryStore.steps), apart from its
// entry: an entry without steps takes 128 bytes, not 144.
type memSteps struct {
	key     string
	steps   map[string][]byte
	expires time.Time
	index   int // in MemoryStore.stepsHeap
}

// NewMemoryStore returns an empty store holding at most maxEntries keys,
// and as many Config.Quota scopes; zero or less means 100,000.
func NewMemoryStore(maxEntries int) *MemoryStore {
	if maxEntries <= 0 {
		maxEntries = defaultMemoryMaxEntries
	}
	return &MemoryStore{max: maxEntries, now: time.Now, entries: make(map[string]*memEntry), steps: make(map[string]*memSteps),
		scopes: make(map[string]*memScope)}
}

// Acquire implements Store, and enforces Config.Quota.
func (s *MemoryStore) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
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
	sc, err := s.admit(ctx, now)
	if err != nil {
		return nil, "", err
	}
	s.tokens++
	e := &memEntry{key: key, token: strconv.FormatUint(s.tokens, 36), expires: now.Add(lockTTL), locked: now, scope: sc}
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
		s.dropSteps(key)
		return nil
	case e.token == "" || e.token != token:
		return ErrLockLost
	}
	heap.Remove(&s.locks, e.index)
	s.leave(e)
	e.record, e.token, e.locked = record, "", time.Time{}
	e.expires = now.Add(ttl)
	heap.Push(&s.records, e)
	e.wake()
	s.dropSteps(key)
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

// SetInvalidate implements Invalidator.
func (s *MemoryStore) SetInvalidate(invalidate func(key string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invalidate = append(s.invalidate, invalidate)
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
		s.leave(e)
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
	for len(s.stepsHeap) > 0 && !now.Before(s.stepsHeap[0].expires) {
		s.dropSteps(s.stepsHeap[0].key)
	}
	s.sweepScopes(now)
}

// SaveStep implements Checkpointer. Keys with checkpoints count against
// the store's maximum as keys do: ErrStoreFull beyond it.
func (s *MemoryStore) SaveStep(_ context.Context, key, token, step string, result []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	if _, err := s.owned(key, token); err != nil {
		return err
	}
	e, ok := s.steps[key]
	if !ok {
		if len(s.steps) >= s.max {
			return ErrStoreFull
		}
		e = &memSteps{key: key, steps: make(map[string][]byte)}
		s.steps[key] = e
		heap.Push(&s.stepsHeap, e)
	}
	e.steps[step] = bytes.Clone(result)
	if exp := now.Add(ttl); exp.After(e.expires) {
		e.expires = exp
		heap.Fix(&s.stepsHeap, e.index)
	}
	return nil
}

// LoadSteps implements Checkpointer.
func (s *MemoryStore) LoadSteps(_ context.Context, key string) (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	e, ok := s.steps[key]
	if !ok {
		return nil, nil
	}
	out := make(map[string][]byte, len(e.steps))
	for step, result := range e.steps {
		out[step] = bytes.Clone(result)
	}
	return out, nil
}

// dropSteps drops the checkpoints of key.
func (s *MemoryStore) dropSteps(key string) {
	if e, ok := s.steps[key]; ok {
		heap.Remove(&s.stepsHeap, e.index)
		delete(s.steps, key)
	}
}

// room reports whether the store has room for one more key.
func (s *MemoryStore) room() bool { return len(s.entries) < s.max }

func (e *memEntry) wake() {
	if e.waiters != nil {
		close(e.waiters)
		e.waiters = nil
	}
}

// timeHeap orders its items by their time, soonest first (container/heap);
// each item holds its index in it, -1 once popped.
type timeHeap[T interface {
	at() time.Time
	setIndex(int)
}] []T

// expiryHeap orders entries by expiry.
type expiryHeap = timeHeap[*memEntry]

func (e *memEntry) at() time.Time  { return e.expires }
func (e *memEntry) setIndex(i int) { e.index = i }
func (e *memSteps) at() time.Time  { return e.expires }
func (e *memSteps) setIndex(i int) { e.index = i }

func (h timeHeap[T]) Len() int           { return len(h) }
func (h timeHeap[T]) Less(i, j int) bool { return h[i].at().Before(h[j].at()) }
func (h timeHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setIndex(i)
	h[j].setIndex(j)
}
func (h *timeHeap[T]) Push(x any) {
	e := x.(T)
	e.setIndex(len(*h))
	*h = append(*h, e)
}
func (h *timeHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	e.setIndex(-1)
	*h = old[:len(old)-1]
	return e
}
