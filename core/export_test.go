package core

import "time"

// SetInitialLease sets e's initial lease, so that a test need not wait out
// the real one (10 s).
func SetInitialLease(e *Engine, d time.Duration) { e.initialLease = d }
