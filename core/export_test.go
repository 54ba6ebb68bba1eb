package core

import "time"

// SetInitialLease sets e's initial lease, so that a test need not wait out
// the real one (10 s).
func SetInitialLease(e *Engine, d time.Duration) { e.initialLease = d }

// MemoryLen returns the number of s's live keys, records and locks.
func MemoryLen(s *MemoryStore) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	return len(s.entries)
}
