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

// ShareRefresher has e's refreshers schedule the leases of the synctest
// bubble e is used in, which otherwise keep a timer each, so that a test
// can drive them on fake time. e must be made and used in that one bubble
// only: the refreshers' timers cannot serve two clocks.
func ShareRefresher(e *Engine) { e.sharedInBubble = true }

// TieredHeld returns how many leases the tiered store s keeps the locks of
// (tiered.held): none once every lease has ended.
func TieredHeld(s Store) int {
	t, ok := s.(*tiered)
	if !ok {
		t = s.(*tieredTx).tiered
	}
	t.heldMu.Lock()
	defer t.heldMu.Unlock()
	return len(t.held)
}

// ErrDurableRecord is the tiered store's error for a second record of a key.
var ErrDurableRecord = errDurableRecord
