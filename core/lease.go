package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the transport-neutral layer: what gRPC interceptors, message
// consumers and the HTTP Engine.Begin share. App authors do not need it.

// Errors of Engine.Acquire, for transports to map to their own answers.
var (
	// ErrKeyReused reports a key already used with another fingerprint
	// (HTTP 422).
	ErrKeyReused = errors.New("idem: key reused with another request")
	// ErrStoreUnavailable reports a store failure under Config.FailClosed,
	// or a busy store (ErrStoreBusy): the call must not run (HTTP 503). It
	// wraps the store's error.
	ErrStoreUnavailable = errors.New("idem: store unavailable")
)

// Call is a unit of work that a transport asks the Engine to run at most
// once per (Scope, Key).
type Call struct {
	// Context carries the values of the store calls (never its cancellation,
	// which only ends a wait for an in-flight key).
	Context context.Context
	// Key is the client's key, as Engine.Key returns it.
	Key string
	// Scope keeps keys apart as Config.Scope does for HTTP: the same Key in
	// two scopes is two records.
	Scope string
	// Method and Route label the Event; Route also joins the scope when
	// Config.ScopeRoute is set (an HTTP route template, a gRPC full method).
	Method string
	Route  string
	// Fingerprint identifies the request: the same key with another
	// fingerprint is ErrKeyReused.
	Fingerprint [32]byte
	// TTL is how long the result is kept. Zero means Config.ResponseTTL.
	TTL time.Duration
	// Transport names the transport in the call's events ("grpc"), whose
	// Code then holds its answers, 0 for success (OK) as in gRPC: InFlight,
	// Reused, Unavailable and OverQuota are those to ErrInFlight,
	// ErrKeyReused, ErrStoreUnavailable and ErrQuotaExceeded, and a record's
	// Code is the answer stored, or Omitted if its body was not (0: Code).
	// Without a Transport, a record's Code is an HTTP status, a failure
	// from 400 on.
	Transport                                         string
	InFlight, Reused, Unavailable, OverQuota, Omitted int
	// Check, if set, vets a completed record of the same fingerprint before
	// it is replayed (a gRPC reply of the method's output type): an error
	// makes it a corrupt record, never replayed, as one that does not decode.
	Check func(*Record) error
}

// ID returns the store key of a client's key in a scope, joined by route
// when it is not empty: the hex SHA-256 of the length-prefixed parts, so no
// key can reach another scope's record or break a store's key layout. The
// Engine joins the route only with Config.ScopeRoute; admin tools use ID to
// find a record.
func ID(scope, key, route string) string {
	var buf [512]byte
	b := appendField(buf[:0], scope)
	b = appendField(b, key)
	if route != "" {
		b = appendField(b, route)
	}
	sum := sha256.Sum256(b)
	var out [64]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// Observe reports ev as the Engine reports its own events: to the Observer,
// or, without one, to slog.Default if it is store trouble. Transports use it
// for the refusals they make before Acquire, such as an invalid key; its
// Duration is theirs to set.
func (e *Engine) Observe(ev Event) {
	d := ev.Duration
	e.observe(ev, time.Now().Add(-d))
}

// Acquire runs the lease protocol for c. It returns:
//
//   - a Lease, nil, nil: run the work, then call Lease.Complete or
//     Lease.Release. While the work runs the lock is refreshed. If the store
//     failed and Config.FailClosed is off, the lease is not Protected and its
//     methods do nothing;
//   - nil, a Record, nil: the call completed before with the same
//     fingerprint: answer with the record (a replay);
//   - nil, nil, an error: ErrKeyReused, ErrInFlight (after waiting up to
//     Config.Wait; at once if c.Context holds the key's own Lease, which
//     would wait for this call), a *QuotaError (Config.Quota), or an
//     error wrapping ErrStoreUnavailable (FailClosed, or a busy store).
//
// Acquire reports the replay, conflict, mismatch or store error to the
// Observer; the Lease reports how it ends.
func (e *Engine) Acquire(c *Call) (*Lease, *Record, error) {
	a := &noAnswers
	if c.Transport != "" {
		a = &answers{transport: c.Transport, conflict: c.InFlight, mismatch: c.Reused, unavailable: c.Unavailable, quota: c.OverQuota,
			omitted: c.Omitted, nested: c.InFlight}
	}
	if c.Check != nil {
		if a == &noAnswers {
			a = &answers{}
		}
		a.check = c.Check
	}
	return e.acquire(c, c.Route, time.Now(), a, &Lease{})
}

// answers are a transport's name and codes for the refusals, reported in
// their events, and the codes a stored record may hold. Without a
// transport, events carry no code.
type answers struct {
	transport                                       string
	conflict, mismatch, unavailable, quota, omitted int
	nested                                          int                 // errNested's
	check                                           func(*Record) error // vets a record before it is replayed; nil: any
}

var noAnswers answers

// errNested is Acquire's answer to a call whose context holds the live
// lease of its own key on the same Engine: the call runs inside the one
// that holds the key (a middleware mounted twice on a route, a request
// dispatched again from its handler, Do called with its request's key).
// Waiting could not help: the holder waits for it. Begin answers it with
// 500 (docs/problems.md, middleware-twice), which the holder does not store.
var errNested = fmt.Errorf("%w: the call's context holds this key's lease: it runs inside the call that holds the key", ErrInFlight)

// acquire is Acquire with the endpoint that Config.ScopeRoute joins to the
// scope (c.Route, or the path of an HTTP request without a route
// template), the call's start time, the transport's answers, and the memory
// of the lease (a Flight holds it: one allocation less).
func (e *Engine) acquire(c *Call, endpoint string, start time.Time, a *answers, l *Lease) (*Lease, *Record, error) {
	ctx := c.Context
	if ctx == nil {
		ctx = context.Background()
	}
	route := ""
	if e.cfg.ScopeRoute {
		route = endpoint
	}
	*l = Lease{
		index:       -1,
		e:           e,
		answers:     a,
		detached:    detachedCtx{call: l},
		ev:          Event{Context: ctx, Transport: a.transport, Method: c.Method, Route: c.Route, Key: c.Key, Scope: c.Scope},
		start:       start,
		id:          ID(c.Scope, c.Key, route),
		fingerprint: c.Fingerprint,
		ttl:         c.TTL,
	}
	l.ctx = &l.detached
	if l.ttl <= 0 {
		l.ttl = e.cfg.ResponseTTL
	}
	if e.cfg.Quota.set() {
		l.ctx = withQuota(l.ctx, c.Scope, e.cfg.Quota)
	}
	// Asked again for its key inside a call that holds it: the store would
	// answer in flight until that call ends, which waits for this one.
	for held, _ := ctx.Value(leaseKey{}).(*Lease); held != nil; held, _ = held.ev.Context.Value(leaseKey{}).(*Lease) {
		if held.e == e && held.id == l.id && held.live() {
			held.nested.Store(true)
			l.ev.Err = errNested
			l.observe(OutcomeConflict, a.nested)
			return nil, nil, errNested
		}
	}
	var deadline time.Time
	if e.cfg.Wait > 0 {
		deadline = start.Add(e.cfg.Wait)
	}
	step := firstWaitStep
	var (
		inFlight bool  // the key was seen in flight
		waitErr  error // a store error met since
		last     bool  // the wait is over: this was the last look
		first    = true
	)
	for {
		// Not cancelled with the request: a store call cut off half-way may
		// have taken the lock all the same (Redis ran the script, the reply
		// was lost), leaving a lock nobody releases before it expires.
		sent := time.Now() // the lock's TTL runs from about then
		sc := &l.firstCtx
		if !first {
			sc = new(storeCtx)
		}
		first = false
		raw, token, tx, err := e.storeAcquire(sc.start(l.ctx, sent.Add(e.cfg.StoreTimeout)), l.id)
		switch {
		case err == nil && tx != nil:
			// Held by its transaction: nothing to refresh; a lock standing
			// in for one (leasedTx) is refreshed as a lease's.
			l.tx = tx
			if lt, ok := asTx[leasedTx](tx); ok {
				if token, lease, renew := lt.lease(); token != "" {
					l.token = token
					l.startRefresh(sent, lease, e.renewal(renew))
				}
			}
			return l, nil, nil
		case err == nil && token != "":
			if time.Since(sent) >= e.initialLease {
				// The reply came after the lock it took may have expired (a
				// store slower than LockTTL, a pause): another call may
				// hold the key by now, and both would run.
				var held bool
				if sent, held = e.reclaim(l, token); !held {
					inFlight, waitErr = true, errLateLock
					break
				}
			}
			l.token = token
			var renew time.Duration
			if e.renews != nil {
				renew, l.every = e.renews.renew(l.id, token)
			}
			l.startRefresh(sent, e.initialLease, e.renewal(renew))
			return l, nil, nil
		case err == nil:
			return l.replay(raw)
		case errors.Is(err, ErrQuotaExceeded):
			return l.overQuota(err)
		case errors.Is(err, ErrInFlight):
			inFlight = true
		case !inFlight:
			return l.storeFailed(err)
		default:
			// The key was in flight a moment ago and may still be: running
			// the work unprotected now could run it twice, whatever
			// FailClosed says. Keep waiting; at the deadline, ErrInFlight,
			// with the store's error rather than the breaker's it caused.
			if waitErr == nil || !errors.Is(err, errCircuitOpen) {
				waitErr = err
			}
		}
		if e.cfg.Wait > 0 && !last && ctx.Err() == nil {
			if time.Now().Before(deadline) && e.wait(ctx, l.id, deadline, step) == nil {
				step = min(2*step, maxWaitStep)
				continue
			}
			// The deadline cut the last backoff step short: look once
			// more, the first request may have finished meanwhile.
			if last = ctx.Err() == nil; last {
				continue
			}
		}
		l.ev.Err = waitErr
		l.observe(OutcomeConflict, a.conflict)
		return nil, nil, ErrInFlight
	}
}

// errLateLock is the Err of the conflict of a call whose lock may have
// expired before the store's reply took it there (reclaim).
var errLateLock = fmt.Errorf("%w: the store answered after the lock it took could have expired (LockTTL shorter than the store's latency?)", ErrLockLost)

// reclaim refreshes the lock that token took, whose reply came after the
// initial lease could have run out: it reports whether the lock is still
// the call's, and when the refresh that says so was sent. If not, the lock
// is released.
func (e *Engine) reclaim(l *Lease, token string) (time.Time, bool) {
	sent := time.Now()
	sc := newStoreCtx(l.ctx, e.cfg.StoreTimeout)
	err := e.cfg.Store.Refresh(sc, l.id, token, e.initialLease)
	sc.cancel()
	if err == nil && time.Since(sent) < e.initialLease {
		return sent, true
	}
	// Fenced by the token: a lock another call took stays; the store
	// forgets this one's share of a quota.
	sc = newStoreCtx(l.ctx, e.cfg.StoreTimeout)
	e.cfg.Store.Release(sc, l.id, token) //nolint:errcheck // the call answers in flight either way
	sc.cancel()
	return time.Time{}, false
}

// leasedTx is a Tx beside which a lock that expires holds its key: the
// tiered store's fast lock, alone while the durable tier is down (fastTxn)
// or in front of the durable tier's transaction (tieredTxn). The Engine
// refreshes it through Store.Refresh with the lock's token, from lease
// (none if it is ""), which also says how long the lock was taken for and
// what each refresh extends it to (0: Config.LockTTL). Commit returns
// ErrLockLost only if the lock alone held the key and was lost (the work
// ran outside any transaction: its effects stand).
type leasedTx interface {
	Tx
	lease() (token string, lease, renew time.Duration)
}

// renewer is implemented by stores that refresh some locks differently:
// the tiered store's. renew returns what a refresh of the lock of key and
// token extends it to (0: LockTTL), and how often it is refreshed (0: a
// third of that). The Engine asks at the acquire and after each refresh.
type renewer interface {
	renew(key, token string) (ttl, every time.Duration)
}

// renewal is what a refresh extends a lock to: renew if it is set and
// shorter than LockTTL, else LockTTL.
func (e *Engine) renewal(renew time.Duration) time.Duration {
	if renew <= 0 || renew > e.cfg.LockTTL {
		return e.cfg.LockTTL
	}
	return renew
}

// asTx returns tx, or the first transaction it wraps (Unwrap), as a T.
func asTx[T any](tx Tx) (T, bool) {
	for tx != nil {
		if t, ok := tx.(T); ok {
			return t, true
		}
		u, ok := tx.(interface{ Unwrap() Tx })
		if !ok {
			break
		}
		tx = u.Unwrap()
	}
	var zero T
	return zero, false
}

// storeAcquire calls Store.Acquire, taking the initial lease, or
// TxStore.Begin, through the breaker, with sc, which it cancels.
func (e *Engine) storeAcquire(sc *storeCtx, id string) (raw []byte, token string, tx Tx, err error) {
	defer sc.cancel()
	if e.cache != nil {
		if raw := e.cache.get(id); raw != nil {
			return raw, "", nil, nil
		}
	}
	if !e.brk.allow() {
		return nil, "", nil, errCircuitOpen
	}
	var gen uint64
	if e.cache != nil {
		gen = e.cache.generation()
	}
	if e.tx != nil {
		raw, tx, err = e.tx.Begin(sc, id, e.cfg.LockTTL)
	} else {
		raw, token, err = e.cfg.Store.Acquire(sc, id, e.initialLease)
	}
	if to, changed := e.brk.done(err); changed {
		e.breakerChanged(sc, to, id, token, tx)
	}
	if err == nil && token == "" && tx == nil && e.cache != nil {
		e.cache.put(id, raw, gen)
	}
	return raw, token, tx, err
}

// breakerChanged reports the breaker's change to to, which the call that
// took token or tx (or neither) caused. If the Observer panics, that lock
// is released before the panic goes on: no lease holds it yet.
func (e *Engine) breakerChanged(ctx context.Context, to breakerState, id, token string, tx Tx) {
	defer func() {
		if p := recover(); p != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.StoreTimeout)
			defer cancel()
			if tx != nil {
				tx.Rollback(ctx) //nolint:errcheck // the panic says what went wrong
			} else if token != "" {
				e.cfg.Store.Release(ctx, id, token) //nolint:errcheck // the panic says what went wrong
			}
			panic(p)
		}
	}()
	e.brk.changed(to)
}

// wait blocks until the lock of id may have been released: through the
// store's Waiter if it has one, else by sleeping step (the caller backs off).
func (e *Engine) wait(ctx context.Context, id string, deadline time.Time, step time.Duration) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if e.waiter != nil {
		return e.waiter.Wait(ctx, id)
	}
	t := time.NewTimer(step)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Lease is a call that holds its key's lock while its work runs. Complete
// and Release may be called more than once and in any order: only the first
// call counts, so a deferred Release covers a panic.
type Lease struct {
	e           *Engine
	answers     *answers
	ctx         context.Context // the call's values, never cancelled
	detached    detachedCtx     // ctx, unless it carries a quota
	ev          Event
	start       time.Time
	id          string
	token       string
	tx          Tx // the transaction that holds the key, with a TxStore
	fingerprint [32]byte
	ttl         time.Duration

	rec   Record // a replayed record, or a Flight's completed one: the lease's memory, one allocation less
	steps steps  // the checkpoints of Step

	// the contexts of the first store call and of the last (Complete or
	// Release), in the lease's memory: two allocations less
	firstCtx, endCtx storeCtx

	nested atomic.Bool // a call inside the lease was refused with errNested

	mu      sync.Mutex // guards done, held, lease and expired against the refresher
	done    bool
	expired bool          // a refresh found the lock gone
	held    time.Time     // when the lock was last known held for lease: taken or refreshed
	lease   time.Duration // how long the lock lasts from held: the initial lease, then renew
	renew   time.Duration // what a refresh extends the lock to: LockTTL, or less (renewer, leasedTx)
	every   time.Duration // how often it is refreshed, if not renew/3 (renewer)
	busy    chan struct{} // closed when the refresh under way ends; nil if none
	busyTo  time.Time     // the deadline of the refresh under way

	due   time.Time   // the next refresh, while the Engine's refresher holds the lease
	index int         // in the refresher's heap; -1 if not in it
	timer *time.Timer // the lease's own refresh timer, under testing/synctest (scheduleRefresh)
}

// NewContext returns a copy of ctx that carries the lease, for the work's
// InfoFromContext, and, with a TxStore, the transaction (TxStore's Tx).
func (l *Lease) NewContext(ctx context.Context) context.Context {
	if l.tx != nil {
		ctx = l.tx.Context(ctx)
	}
	return context.WithValue(ctx, leaseKey{}, l)
}

// Protected reports whether the lease holds the key's lock. It is false
// when the store failed and the work runs unprotected (fail-open).
func (l *Lease) Protected() bool { return l.token != "" || l.tx != nil }

// live reports whether the lease has not ended yet.
func (l *Lease) live() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.done
}

// Buffered reports whether the lease holds its key in a TxStore's
// transaction: the work's writes commit with its result in Complete, so
// nothing of the result may reach a client before Complete returns nil.
func (l *Lease) Buffered() bool { return l.tx != nil }

func (l *Lease) replay(raw []byte) (*Lease, *Record, error) {
	rec := &l.rec
	err := l.e.refuseClear(raw)
	if err == nil {
		err = rec.open(l.ctx, l.e.cfg.Sealer, l.id, raw)
	}
	if err == nil && rec.Fingerprint != l.fingerprint {
		l.observe(OutcomeMismatch, l.answers.mismatch)
		return nil, nil, ErrKeyReused
	}
	if err == nil && l.answers.check != nil { // the same request's record: it must be an answer to it
		if cerr := l.answers.check(rec); cerr != nil {
			err = fmt.Errorf("%w: %w", ErrCorruptRecord, cerr)
		}
	}
	if err != nil {
		// The key was used: running the work unprotected (fail-open) could
		// run it twice, whatever FailClosed says (a sealing key missing on
		// this instance, a record of another transport).
		l.ev.Err = err
		l.observe(OutcomeStoreError, l.answers.unavailable)
		return nil, nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	code := rec.Code
	if rec.BodyOmitted && l.answers.omitted != 0 {
		code = l.answers.omitted
	}
	l.observe(OutcomeReplay, code)
	return nil, rec, nil
}

// storeFailed applies the fail-open or fail-closed policy. A busy store
// refuses in both: the work could need what keeps the store busy (a pool's
// connections), and a duplicate of a running call would run again. So does
// a full one: whoever fills it (cheap 4xx answers are stored too) would
// otherwise make every new key run unprotected, and run twice.
func (l *Lease) storeFailed(err error) (*Lease, *Record, error) {
	l.ev.Err = err
	if l.e.cfg.FailClosed || errors.Is(err, ErrStoreBusy) || errors.Is(err, ErrStoreFull) {
		l.observe(OutcomeStoreError, l.answers.unavailable)
		return nil, nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	l.observe(OutcomeStoreError, 0)
	l.done = true // unprotected: Complete and Release do nothing
	return l, nil, nil
}

// observe reports the lease's event with outcome o and code.
func (l *Lease) observe(o Outcome, code int) {
	l.ev.Outcome = o
	l.setCode(code)
	l.e.observe(l.ev, l.start)
}

// failure reports whether code, a record's, answers with a failure: an HTTP
// status of 400 or more, Do's permanent error; a code other than 0 (OK) for
// the other transports, gRPC's and a Call's.
func (l *Lease) failure(code int) bool {
	if l.ev.Transport == "" || l.ev.Transport == httpAnswers.transport {
		return code >= 400
	}
	return code != 0
}

// setCode sets the code of the lease's event, if its transport has codes.
func (l *Lease) setCode(code int) {
	if l.ev.Transport != "" {
		l.ev.Code = code
	}
}

// Complete stores rec as the call's result and releases the lock. Its Code,
// Header, Body and omitted-body fields are the work's; Complete applies
// Config's storage policy to them (Storable, DeniedHeaders, KeepHeaders,
// MaxStoredBodyBytes) and fills the others. If the store fails to take it,
// the lock is left to expire: the work ran, and a retry gets ErrInFlight
// until then (see docs/design.md).
//
// With a TxStore, Complete commits the record with the work's writes. If
// that fails it returns an error wrapping ErrStoreUnavailable: nothing was
// kept, or it is not known whether it was, and the result must not be
// delivered (a retry runs the work again or replays it). Otherwise it
// returns nil.
func (l *Lease) Complete(rec *Record) error {
	if !l.finish() {
		return nil
	}
	now := time.Now()
	l.mu.Lock()
	// Expired: a refresh found the lock gone, or none succeeded for the
	// lease (they failed with other errors).
	expired := l.expired || now.Sub(l.held) >= l.lease
	l.mu.Unlock()
	l.setCode(rec.Code)
	l.e.applyPolicy(rec)
	rec.Key, rec.Scope, rec.Fingerprint = l.ev.Key, l.ev.Scope, l.fingerprint
	rec.RequestedAt, rec.CompletedAt, rec.ExpiresAt = l.start, now, now.Add(l.ttl)
	size, cost := rec.sizes()
	data := rec.appendBinary(make([]byte, 0, size))
	var gen uint64
	if l.e.cache != nil {
		gen = l.e.cache.generation()
	}
	ctx := l.endContext(now)
	defer ctx.cancel()
	var err error
	switch {
	case rec.Code < 0 || rec.Code > maxCode:
		return l.unstorable(ctx, errCodeRange)
	case cost > decodeBudget(len(data)): // DecodeRecord would refuse it
		return l.unstorable(ctx, errHeadersTooMany)
	case l.e.cfg.Sealer != nil:
		if data, err = sealRecord(ctx, l.e.cfg.Sealer, l.id, rec, data); err != nil {
			return l.unstorable(ctx, err)
		}
	}
	if l.tx != nil {
		return l.commit(ctx, data, gen, l.failure(rec.Code))
	}
	err = l.e.cfg.Store.Complete(ctx, l.id, l.token, data, l.ttl)
	switch {
	case err == nil && expired:
		// Stored late: the lock expired, or may have (no refresh confirmed
		// it), and nobody took the key; but for a while a duplicate could
		// have run the work.
		l.ev.Outcome, l.ev.Err = OutcomeStored, errStoredLate
	case err == nil:
		l.ev.Outcome = OutcomeStored
		if l.e.cache != nil {
			l.e.cache.put(l.id, data, gen)
		}
	case errors.Is(err, ErrLockLost):
		l.ev.Outcome, l.ev.Err = OutcomeLockLost, err
	default:
		// Not stored, or not known to be (a timeout may hide a success).
		// The lock is left to expire, so that a retry gets ErrInFlight until
		// then rather than run the work again now.
		l.ev.Outcome, l.ev.Err = OutcomeStoreError, err
	}
	l.e.observe(l.ev, l.start)
	return nil
}

// commit is Complete with a TxStore.
func (l *Lease) commit(ctx context.Context, data []byte, gen uint64, failed bool) error {
	err := l.tx.Commit(ctx, data, l.ttl, failed)
	if l.token != "" && errors.Is(err, ErrLockLost) { // a leasedTx: the work's effects stand
		l.ev.Outcome, l.ev.Err = OutcomeLockLost, err
		l.e.observe(l.ev, l.start)
		return nil
	}
	if err != nil {
		l.tx.Rollback(ctx) //nolint:errcheck // the commit's error says it
		l.ev.Outcome, l.ev.Err = OutcomeStoreError, err
		l.e.observe(l.ev, l.start)
		return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	l.ev.Outcome = OutcomeStored
	if l.e.cache != nil {
		l.e.cache.put(l.id, data, gen)
	}
	l.e.observe(l.ev, l.start)
	return nil
}

// Release ends the lease without storing: the lock is released so that a
// retry runs the work again. code is the work's answer (0 if none, as after
// a panic) and reason why it is not stored (nil: the store policy).
func (l *Lease) Release(code int, reason error) {
	if l.finish() {
		l.release(code, reason)
	}
}

func (l *Lease) release(code int, reason error) {
	l.setCode(code)
	ctx := l.endContext(time.Now())
	defer ctx.cancel()
	var err error
	if l.tx != nil {
		err = l.tx.Rollback(ctx)
	} else {
		err = l.e.cfg.Store.Release(ctx, l.id, l.token)
	}
	l.ev.Outcome, l.ev.Err = OutcomeNotStored, reason
	switch {
	case errors.Is(err, ErrLockLost):
		l.ev.Outcome, l.ev.Err = OutcomeLockLost, err
	case err != nil:
		l.ev.Outcome, l.ev.Err = OutcomeStoreError, err
	}
	l.e.observe(l.ev, l.start)
}

// applyPolicy is the storage policy of every transport: it drops the
// headers that are denied, named by the response's Connection header
// (hop-by-hop, RFC 9110 section 7.6.1) or, with Config.KeepHeaders, not
// kept, and stores a body over Config.MaxStoredBodyBytes as its size and
// SHA-256. A header name that starts with a colon is a transport's own:
// ":name" is kept, ":prefix:name" (gRPC's trailers) is judged as name; so
// is net/http's "Trailer:name" (http.TrailerPrefix), which its server sends
// as the trailer name, and a replay with it (over HTTP/2) too.
func (e *Engine) applyPolicy(rec *Record) {
	connection := connectionNamed(rec.Header["Connection"])
	for name := range rec.Header {
		base := name
		switch {
		case strings.HasPrefix(name, ":"):
			i := strings.LastIndexByte(name, ':')
			if i == 0 {
				continue
			}
			base = name[i+1:]
		case strings.HasPrefix(name, http.TrailerPrefix):
			base = name[len(http.TrailerPrefix):]
		}
		ck := http.CanonicalHeaderKey(base)
		if e.denied[ck] || e.kept != nil && !e.kept[ck] || connection[ck] {
			delete(rec.Header, name)
		}
	}
	if !rec.BodyOmitted && len(rec.Body) > e.cfg.MaxStoredBodyBytes {
		rec.BodyOmitted, rec.BodySize, rec.BodySHA256 = true, int64(len(rec.Body)), sha256.Sum256(rec.Body)
		rec.Body = nil
	}
}

// connectionNamed returns the canonical names of the headers that the
// comma-separated lists in values (the Connection header's) name, nil if
// none. A set, looked up once per header: matching every header against
// every listed name cost their product, 140 ms of CPU for 4000 headers
// half of which Connection named.
func connectionNamed(values []string) map[string]bool {
	var named map[string]bool
	for _, v := range values {
		for field := range strings.SplitSeq(v, ",") {
			if field = strings.TrimSpace(field); field != "" {
				if named == nil {
					named = make(map[string]bool)
				}
				named[http.CanonicalHeaderKey(field)] = true
			}
		}
	}
	return named
}

// errStoredLate is the Err of an OutcomeStored event whose lock expired,
// or may have, while the work ran.
var errStoredLate = fmt.Errorf("%w (or may have been: no refresh confirmed the lock for LockTTL) while the work ran; "+
	"the result was stored as no other call had taken the key", ErrLockLost)

// storeContext bounds a store call made after the work: the call's values,
// no cancellation (the client may be gone, the lock must still be settled),
// and at most Config.StoreTimeout.
func (l *Lease) storeContext() (context.Context, context.CancelFunc) {
	sc := newStoreCtx(l.ctx, l.e.cfg.StoreTimeout)
	return sc, sc.cancel
}

// endContext is storeContext for the store call that ends the lease, made
// once (finish), in the lease's memory, now.
func (l *Lease) endContext(now time.Time) *storeCtx {
	return l.endCtx.start(l.ctx, now.Add(l.e.cfg.StoreTimeout))
}

// finish marks the lease done and stops the refresher, waiting for a
// refresh under way; it reports whether this call was the first.
func (l *Lease) finish() bool {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return false
	}
	l.done = true
	switch {
	case l.timer != nil:
		l.timer.Stop()
	case l.token != "":
		l.refresher().cancel(l)
	}
	busy, to := l.busy, l.busyTo
	l.mu.Unlock()
	if busy != nil {
		// A refresh under way, within its deadline: not for ever if the
		// store ignores it, or if this call comes from the refresh itself
		// (an Observer's, on a store's event).
		t := time.NewTimer(time.Until(to) + busyGrace)
		select {
		case <-busy:
		case <-t.C:
		}
		t.Stop()
	}
	return true
}

// busyGrace is how long finish waits for a refresh past its deadline.
const busyGrace = 100 * time.Millisecond

// startRefresh has an Engine's refresher extend the lock, taken for lease,
// to renew while the work runs, so that slow work keeps its lock: a third
// into the initial lease, then every renew/3.
func (l *Lease) startRefresh(taken time.Time, lease, renew time.Duration) {
	l.mu.Lock()
	l.held, l.lease, l.renew = taken, lease, renew
	l.scheduleRefresh(taken.Add(l.lease / 3))
	l.mu.Unlock()
}

// storeRefresh calls Store.Refresh, turning a panic of the store into an
// error: it runs on a goroutine of its own, where a panic would end the
// process rather than one call.
func (l *Lease) storeRefresh(ctx context.Context, renew time.Duration) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("idem: Store.Refresh panicked: %v", r)
		}
	}()
	return l.e.cfg.Store.Refresh(ctx, l.id, l.token, renew)
}

func (l *Lease) refresh() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	renew, period := l.renew, l.period()
	timeout := min(period/2, l.e.cfg.StoreTimeout)
	busy := make(chan struct{})
	l.busy, l.busyTo = busy, time.Now().Add(timeout)
	l.mu.Unlock()
	// The store call runs without the mutex; Complete and Release wait for
	// it (finish), within its deadline, so that a store never sees a
	// lease's refresh and its end at once. At most half the period, so that
	// a refresh that times out leaves time for another before the lock
	// expires. Its context carries none of the call's values: the call may
	// outlast the request, whose context a framework reuses once the
	// adapter returns; only the call's lease, for a store's own events.
	ctx, cancel := context.WithTimeout(&refreshCtx{Context: context.Background(), call: l}, timeout)
	sent := time.Now()
	err := l.storeRefresh(ctx, renew)
	cancel()

	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy = nil
	close(busy)
	switch {
	case err == nil:
		l.held, l.lease = sent, renew
	case errors.Is(err, ErrLockLost):
		l.expired = true
	}
	if l.done || l.expired {
		// No use refreshing a lock someone else may hold. The loss is
		// reported once, by Complete or Release, whose store call finds it.
		return
	}
	if l.tx == nil && l.e.renews != nil {
		// The tiered store refreshes a lock more often while a tier's part
		// of it is missing or in doubt; a longer period applies after the
		// next refresh, before what this one gave runs out.
		ttl, every := l.e.renews.renew(l.id, l.token)
		l.renew, l.every = l.e.renewal(ttl), every
		period = min(period, l.period())
	}
	// On another error, try again: the lock is still ours until it
	// expires, so sooner than the next tick if it expires before then (the
	// initial lease is shorter than LockTTL), but never in a burst as the
	// end nears.
	next := period
	if err != nil {
		if left := l.lease - time.Since(l.held); left > 0 && left/2 < next {
			next = min(next, max(left/2, minRefreshRetry))
		}
	}
	l.scheduleRefresh(time.Now().Add(next))
}

// period is how often l's lock is refreshed: every, or a third of renew.
// l.mu is held.
func (l *Lease) period() time.Duration {
	if l.every > 0 {
		return min(l.every, l.renew/3)
	}
	return l.renew / 3
}

// refresher returns the Engine's refresher of l: by the first digit of its
// store key, a hex SHA-256 (ID).
func (l *Lease) refresher() *refresher {
	c := l.id[0]
	if c >= 'a' {
		c -= 'a' - 10 - '0'
	}
	return &l.e.refreshers[(c-'0')%16]
}

// scheduleRefresh arranges for l.refresh to run at due, with l.mu held:
// through the Engine's refresher, or, in a testing/synctest bubble, whose
// fake clock the refresher's one timer cannot share with real time or with
// another bubble, on a timer of the lease's own. A bubble's times carry no
// monotonic clock reading: that tells them apart.
func (l *Lease) scheduleRefresh(due time.Time) {
	switch {
	case l.timer != nil:
		l.timer.Reset(time.Until(due))
	case due != due.Round(0) || l.e.sharedInBubble: // real time
		l.refresher().schedule(l, due)
	default:
		l.timer = time.AfterFunc(time.Until(due), l.refresh)
	}
}

// minRefreshRetry is the shortest wait before a failed refresh is retried.
const minRefreshRetry = 10 * time.Millisecond

// Once runs fn at most once per (scope, key) and not again once it
// succeeded, for as long as its record lasts (Config.ResponseTTL): the
// consumer side of idempotency, for events identified by key; keep records
// longer than the broker may redeliver. It reports whether fn ran now; fn's context carries the key (Step,
// DerivedKey). A duplicate of a completed event returns false, nil; one in
// flight elsewhere returns ErrInFlight, one over Config.Quota a *QuotaError
// (redeliver them later); an error of fn
// releases the key, so a redelivery runs fn again, and is returned as is.
//
// With a store separate from fn's effects, a crash between the effect and
// the completion runs fn again on redelivery, once the lock expires: an
// effect in the same database as its mark (pgstore's inbox) is exactly once.
func (e *Engine) Once(ctx context.Context, scope, key string, fn func(context.Context) error) (ran bool, err error) {
	c := &Call{Context: ctx, Key: key, Scope: scope, Method: "once"}
	l, rec, err := e.acquire(c, scope, time.Now(), &noAnswers, &Lease{}) // ScopeRoute joins the scope again, as it always has
	if err != nil || rec != nil {
		return false, err
	}
	defer l.Release(0, errAborted) // a panic of fn
	if err := fn(l.NewContext(ctx)); err != nil {
		l.Release(0, err)
		return true, err
	}
	return true, l.Complete(&Record{})
}
