package core

import (
	"container/heap"
	"sync"
	"time"
)

// refresher extends the locks of leases while their work runs: one timer
// for all of them, set for the soonest refresh due, rather than one per
// lease (a timer costs two allocations and the runtime's timer heap, on
// every request, for a refresh that most requests end before). An Engine
// has 16, by the first digit of a lease's store key (Lease.refresher).
// Each refresh runs in a goroutine of its own, so that a slow store call
// delays no other lease's. Leases in a testing/synctest bubble keep a timer
// each (Lease.scheduleRefresh).
type refresher struct {
	mu    sync.Mutex
	due   timeHeap[*Lease] // by Lease.due
	timer *time.Timer      // made by the first schedule
	at    time.Time        // when timer fires; zero if it is stopped
}

func (l *Lease) at() time.Time  { return l.due }
func (l *Lease) setIndex(i int) { l.index = i }

// schedule arranges for l.refresh to run at due. l must not be scheduled.
func (r *refresher) schedule(l *Lease, due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.due = due
	heap.Push(&r.due, l)
	r.arm()
}

// cancel unschedules l, if it is scheduled.
func (r *refresher) cancel(l *Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.index >= 0 {
		heap.Remove(&r.due, l.index)
	}
	// The timer may now fire early: fire finds nothing due and sets it
	// again, at most once per lease that ended first.
}

// arm sets the timer for the soonest refresh due, if it is not set for
// then already. r.mu is held.
func (r *refresher) arm() {
	if len(r.due) == 0 {
		return
	}
	next := r.due[0].due
	switch {
	case r.timer == nil:
		r.timer = time.AfterFunc(time.Until(next), r.fire)
	case r.at.IsZero() || next.Before(r.at):
		r.timer.Reset(time.Until(next))
	default:
		return
	}
	r.at = next
}

// fire starts the refreshes that are due and sets the timer for the next.
func (r *refresher) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = time.Time{}
	now := time.Now()
	for len(r.due) > 0 && !r.due[0].due.After(now) {
		go heap.Pop(&r.due).(*Lease).refresh()
	}
	r.arm()
}
