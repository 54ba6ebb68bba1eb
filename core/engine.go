package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Engine decides, for each request, whether to run the handler, replay a
// stored response or refuse. It is safe for concurrent use; build one with
// New and share it between all the routes that need it; the zero Engine is
// not usable.
type Engine struct {
	cfg    Config
	denied map[string]bool // canonical names never stored: the base list and Config.DeniedHeaders
	kept   map[string]bool // canonical names of Config.KeepHeaders; nil keeps all
	tx     TxStore         // Config.Store if it is one
	waiter Waiter          // Config.Store or a store it wraps, if one is
	renews renewer         // likewise
	brk    *breaker
	// refreshers extend the locks of the leases whose work runs, by the
	// first digit of the lease's store key: 16 locks rather than one for
	// an Engine that serves many cores
	refreshers [16]refresher
	// sharedInBubble has the refreshers take the leases of a synctest
	// bubble too: for tests (export_test.go)
	sharedInBubble bool
	cache          *replayCache // nil without Config.ReplayCache
	// initialLease is the TTL of a new lock, extended to LockTTL by the
	// first refresh: a lock that a stalled store takes after the request
	// gave up on it refuses retries for this long, not LockTTL.
	initialLease time.Duration
	retry        string // Retry-After, in seconds
}

// initialBodyBuffer bounds the buffer allocated for a request body before
// its bytes arrive.
const initialBodyBuffer = 64 << 10

// Wait mode without a core.Waiter polls Acquire with exponential backoff.
const (
	firstWaitStep = 10 * time.Millisecond
	maxWaitStep   = 250 * time.Millisecond
)

// New returns an Engine for cfg; zero fields of cfg take their defaults.
func New(cfg Config) (*Engine, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cfg.cloneSlices() // the Engine's own: a caller's later change cannot race a request
	e := &Engine{
		cfg:    cfg,
		denied: make(map[string]bool, len(baseDeniedHeaders)+len(cfg.DeniedHeaders)),
		retry:  strconv.FormatInt(ceilSeconds(cfg.RetryAfter), 10),
	}
	e.initialLease = min(cfg.LockTTL, max(minInitialLease, 3*cfg.StoreTimeout))
	e.brk = &breaker{failures: cfg.BreakerFailures, cooldown: cfg.BreakerCooldown, probeFor: addSat(cfg.BreakerCooldown, cfg.StoreTimeout), now: time.Now,
		changed: func(s breakerState) { e.observe(Event{Outcome: OutcomeBreaker, Breaker: s.String()}, time.Now()) }}
	e.tx, _ = cfg.Store.(TxStore)
	e.waiter, _ = find[Waiter](cfg.Store)
	e.renews, _ = find[renewer](cfg.Store)
	if cfg.ReplayCache > 0 {
		e.cache = newReplayCache(cfg.ReplayCache)
	}
	for s := cfg.Store; s != nil; {
		if n, ok := s.(notifier); ok {
			n.SetObserver(func(ev Event) { e.observe(ev, time.Now()) })
		}
		if i, ok := s.(Invalidator); ok && e.cache != nil {
			i.SetInvalidate(e.cache.drop)
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	for _, h := range slices.Concat(baseDeniedHeaders, cfg.DeniedHeaders) {
		e.denied[http.CanonicalHeaderKey(h)] = true
	}
	if len(cfg.KeepHeaders) > 0 {
		e.kept = make(map[string]bool, len(cfg.KeepHeaders))
		for _, h := range cfg.KeepHeaders {
			e.kept[http.CanonicalHeaderKey(h)] = true
		}
	}
	return e, nil
}

// Config returns the Engine's configuration with its defaults filled in,
// for adapters and the OpenAPI emitter (which documents MaxKeyLength,
// Required and Methods). New takes it back as it is: an Engine that accepts
// no legacy key header reports LegacyKeyHeader "-".
func (e *Engine) Config() Config {
	cfg := e.cfg
	cfg.cloneSlices()
	if cfg.LegacyKeyHeader == "" {
		cfg.LegacyKeyHeader = "-"
	}
	return cfg
}

// minInitialLease is the shortest initial lease (see Engine.initialLease).
const minInitialLease = 10 * time.Second

// observe reports ev, which started at start, to the Observer, or, without
// one, logs it if it is store trouble; it reads the clock for its Duration
// only if the event is reported.
func (e *Engine) observe(ev Event, start time.Time) {
	if ev.Context == nil {
		ev.Context = context.Background()
	}
	if e.cfg.Observer != nil {
		ev.Duration = time.Since(start)
		e.cfg.Observer(ev)
		return
	}
	// No Observer: a store outage is never silent.
	switch ev.Outcome {
	case OutcomeStoreError, OutcomeLockLost, OutcomeBreaker, OutcomeFallback:
		if !errors.Is(ev.Err, errCircuitOpen) { // the breaker's opening was logged
			ev.Duration = time.Since(start)
			SlogObserver(slog.Default())(ev)
		}
	}
}

// Key returns the client's key from h: from KeyHeader or LegacyKeyHeader
// (which must agree when both are sent; gRPC metadata names are matched
// lower-case by its adapter), unquoted and validated. present is false when
// neither header was sent; err wraps ErrInvalidKey.
func (e *Engine) Key(h HeaderGetter) (key string, present bool, err error) {
	name, values := e.cfg.KeyHeader, headerValues(h, e.cfg.KeyHeader)
	var legacy []string
	if e.cfg.LegacyKeyHeader != "" {
		if legacy = headerValues(h, e.cfg.LegacyKeyHeader); len(legacy) == 0 {
			legacy = nil // not sent, even as an empty list
		}
	}
	if len(values) == 0 {
		name, values, legacy = e.cfg.LegacyKeyHeader, legacy, nil
	}
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fmt.Errorf("%w: %d values of %s, want one", ErrInvalidKey, len(values), name)
	}
	raw := values[0]
	key, err = parseKey(raw, e.cfg.MaxKeyLength)
	if err == nil && legacy != nil {
		if other, err := parseKey(legacy[0], e.cfg.MaxKeyLength); len(legacy) != 1 || err != nil || other != key {
			return raw, true, fmt.Errorf("%w: %s and %s differ", ErrInvalidKey, e.cfg.KeyHeader, e.cfg.LegacyKeyHeader)
		}
	}
	if err == nil && e.cfg.ValidateKey != nil {
		err = e.cfg.ValidateKey(key)
	}
	if err != nil {
		return raw, true, fmt.Errorf("%w: %w", ErrInvalidKey, err) // the validator's error stays reachable with errors.Is and errors.As
	}
	return key, true, nil
}

// ceilSeconds is d in whole seconds, rounded up, without overflowing.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// addSat is a+b, at most math.MaxInt64 (both are at least 0).
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
