package core

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Quota bounds the keys of each scope (Config.Quota): how many may run at
// once, and how many may start within a window. A replay of a completed key
// is never refused: the store answers it before it looks at the quota.
type Quota struct {
	// InFlight is the most keys of one scope in flight at once. Default: 0,
	// no bound.
	InFlight int
	// PerWindow is the most keys of one scope admitted within any Window: a
	// key counts each time its lock is taken to run it, so a key released
	// (a 5xx) and run again counts again. Default: 0, no bound.
	PerWindow int
	// Window is the span of PerWindow. Default: time.Minute.
	Window time.Duration
}

// ErrQuotaExceeded reports a key refused under Config.Quota (HTTP 429).
// Stores return it as a *QuotaError.
var ErrQuotaExceeded = errors.New("idem: quota exceeded")

// QuotaError is the error of a store that refused a new key under
// Config.Quota. It wraps ErrQuotaExceeded.
type QuotaError struct {
	// RetryAfter is when the scope's window has room again (PerWindow), or
	// 0 if a key in flight must end first (InFlight): Config.RetryAfter.
	RetryAfter time.Duration
}

// Error says which bound refused the key.
func (e *QuotaError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%v: too many new keys in the scope's window (room again in %v)", ErrQuotaExceeded, e.RetryAfter)
	}
	return fmt.Sprintf("%v: too many keys of the scope in flight", ErrQuotaExceeded)
}

// Unwrap returns ErrQuotaExceeded.
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// quotaKey is the context key of a call's quota (QuotaFromContext).
type quotaKey struct{}

type quotaCall struct {
	scope string
	q     Quota
}

// QuotaFromContext returns the scope and quota of the call whose Store.Acquire
// ctx is: scope is an opaque id of the call's scope (32 hex digits), the
// same for every key of the scope. ok is false without Config.Quota.
//
// A store that enforces quotas answers a completed key's record first,
// whatever the quota; then, before it takes the lock of a new key, it
// admits the key atomically across processes: at most q.InFlight keys of
// scope locked at once, at most q.PerWindow keys admitted within any
// q.Window; otherwise it takes no lock and returns a *QuotaError. It says
// so with a method EnforcesQuota() bool that returns true (New refuses a
// Config.Quota otherwise, looking through Unwrap).
func QuotaFromContext(ctx context.Context) (scope string, q Quota, ok bool) {
	c, ok := ctx.Value(quotaKey{}).(*quotaCall)
	if !ok {
		return "", Quota{}, false
	}
	return c.scope, c.q, true
}

// withQuota returns ctx carrying the quota of scope.
func withQuota(ctx context.Context, scope string, q Quota) context.Context {
	sum := sha256.Sum256([]byte("idem scope\x00" + scope))
	return context.WithValue(ctx, quotaKey{}, &quotaCall{scope: hex.EncodeToString(sum[:16]), q: q})
}

func (q Quota) set() bool { return q.InFlight > 0 || q.PerWindow > 0 }

// setDefaults checks q and fills its Window.
func (q *Quota) setDefaults() error {
	if q.InFlight < 0 || q.PerWindow < 0 || q.Window < 0 {
		return errors.New("idem: negative Quota")
	}
	if q.Window == 0 {
		q.Window = time.Minute
	}
	return nil
}

// enforcesQuota reports whether s, or a store it wraps (Unwrap), enforces
// Config.Quota.
func enforcesQuota(s Store) bool {
	q, ok := find[interface{ EnforcesQuota() bool }](s)
	return ok && q.EnforcesQuota()
}

// overQuota reports a call refused under Config.Quota.
func (l *Lease) overQuota(err error) (*Lease, *Record, error) {
	l.ev.Err = err
	l.observe(OutcomeQuota, l.answers.quota)
	return nil, nil, err
}

// quotaRetryAfter is the Retry-After of a refusal err under Config.Quota,
// in seconds.
func (e *Engine) quotaRetryAfter(err error) string {
	var qe *QuotaError
	if errors.As(err, &qe) && qe.RetryAfter > 0 {
		return strconv.FormatInt(ceilSeconds(qe.RetryAfter), 10)
	}
	return e.retry
}

// quotaDetail is the problem detail of a refusal err under Config.Quota.
func quotaDetail(err error) string {
	var qe *QuotaError
	if errors.As(err, &qe) && qe.RetryAfter > 0 {
		return "too many new requests with idempotency keys in this scope's window; retry later"
	}
	return "too many requests with idempotency keys of this scope in flight; retry when one is done"
}

// EnforcesQuota reports that MemoryStore enforces Config.Quota (see
// QuotaFromContext).
func (s *MemoryStore) EnforcesQuota() bool { return true }

// memScope is a scope's share of a MemoryStore under Config.Quota.
type memScope struct {
	id       string
	inFlight int         // its admitted locks that live
	admitted []time.Time // when its admissions leave the window, oldest first
	index    int         // in MemoryStore.windows, -1 if not there
}

// admit admits a new key of the scope of ctx's quota, if any, at now: it
// returns the scope to count the key's lock against (nil without a quota),
// or a *QuotaError, or ErrStoreFull for a new scope beyond the store's
// maximum.
func (s *MemoryStore) admit(ctx context.Context, now time.Time) (*memScope, error) {
	id, q, ok := QuotaFromContext(ctx)
	if !ok {
		return nil, nil
	}
	sc := s.scopes[id]
	if sc == nil {
		if len(s.scopes) >= s.max {
			// Scopes count as keys do: those of released keys stay for
			// the window, and would otherwise pile up past the bound.
			return nil, ErrStoreFull
		}
		sc = &memScope{id: id, index: -1}
	}
	n := 0
	for n < len(sc.admitted) && !now.Before(sc.admitted[n]) {
		n++
	}
	if sc.admitted = sc.admitted[n:]; len(sc.admitted) == 0 && sc.index >= 0 {
		heap.Remove(&s.windows, sc.index)
	}
	switch {
	case q.InFlight > 0 && sc.inFlight >= q.InFlight:
		return nil, &QuotaError{}
	case q.PerWindow > 0 && len(sc.admitted) >= q.PerWindow:
		return nil, &QuotaError{RetryAfter: sc.admitted[0].Sub(now)}
	}
	s.scopes[id] = sc
	sc.inFlight++
	if q.PerWindow > 0 {
		sc.admitted = append(sc.admitted, now.Add(q.Window))
		if sc.index < 0 {
			heap.Push(&s.windows, sc)
		} else {
			heap.Fix(&s.windows, sc.index)
		}
	}
	return sc, nil
}

// leave ends the count of e's lock in its scope.
func (s *MemoryStore) leave(e *memEntry) {
	sc := e.scope
	if sc == nil {
		return
	}
	e.scope = nil
	sc.inFlight--
	if sc.inFlight == 0 && sc.index < 0 {
		delete(s.scopes, sc.id)
	}
}

// sweepScopes forgets the windows that ended by now, and the scopes left
// with nothing to count.
func (s *MemoryStore) sweepScopes(now time.Time) {
	for len(s.windows) > 0 && !now.Before(s.windows[0].last()) {
		sc := heap.Pop(&s.windows).(*memScope)
		sc.admitted = nil
		if sc.inFlight == 0 {
			delete(s.scopes, sc.id)
		}
	}
}

// last is when the scope's last admission leaves its window.
func (sc *memScope) last() time.Time { return sc.admitted[len(sc.admitted)-1] }

// scopeHeap orders scopes by when their window empties.
type scopeHeap = timeHeap[*memScope]

func (sc *memScope) at() time.Time  { return sc.last() }
func (sc *memScope) setIndex(i int) { sc.index = i }
