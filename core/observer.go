package core

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Outcome is what the Engine did with one request.
type Outcome int

// Outcomes reported to the Observer.
const (
	OutcomeReplay     Outcome = iota + 1 // a stored response was replayed
	OutcomeStored                        // the handler ran and its response was stored (Err wraps ErrLockLost if the lock expired, or may have, meanwhile)
	OutcomeNotStored                     // the handler ran; its response was not stored (5xx, panic, hijack, policy), the lock was released
	OutcomeConflict                      // the key was in flight: 409, or 500 middleware-twice if the call's context holds its lease
	OutcomeMismatch                      // the key was used with another request: 422
	OutcomeInvalidKey                    // the key was missing (and required) or malformed: 400
	OutcomeTooLarge                      // the request body was over the limit: 413
	OutcomeBadBody                       // the request body could not be read: 400, or 500 if a middleware before idem had read it
	OutcomeStoreError                    // the store failed: before the handler, it ran unprotected (fail-open) or got 503; after it, nothing was stored
	OutcomeLockLost                      // the lock expired while the handler ran and the response was not stored; reported once, when the flight ends
	OutcomeBreaker                       // the store's circuit breaker changed state (Event.Breaker); not a request
	OutcomeFallback                      // a tiered store did without one tier (Err); Method is the store call, Key, Scope, Route the call's
	OutcomeQuota                         // a new key was refused under Config.Quota: 429
)

var outcomeNames = [...]string{
	OutcomeReplay:     "replay",
	OutcomeStored:     "stored",
	OutcomeNotStored:  "not_stored",
	OutcomeConflict:   "conflict",
	OutcomeMismatch:   "mismatch",
	OutcomeInvalidKey: "invalid_key",
	OutcomeTooLarge:   "too_large",
	OutcomeBadBody:    "bad_body",
	OutcomeStoreError: "store_error",
	OutcomeLockLost:   "lock_lost",
	OutcomeBreaker:    "breaker",
	OutcomeFallback:   "fallback",
	OutcomeQuota:      "quota",
}

// String returns a short snake_case name, fit for a metric label.
func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Event describes one outcome. Observers receive it synchronously, mostly
// on the request's goroutine (a tiered store's fallback may come from a
// lock's refresh): they must be quick and safe for concurrent use. A
// request ends with one event of its outcome, after any fallback or
// breaker events it caused.
type Event struct {
	// Context is the request's context, for tracing, or
	// context.Background() for an event of no request (a breaker's change).
	// It may be done already (a client that went away); do not keep it.
	Context context.Context
	Outcome Outcome
	Key     string // the client's key, unquoted; mask it before logging (MaskKey)
	Scope   string // the request's scope (Config.Scope, Call.Scope)
	Method  string // the HTTP method, a gRPC call's full method, "once" or "do"; the store call of an OutcomeFallback
	// Route is the route template of an HTTP request ("unmatched" if it
	// has none), a gRPC call's full method, or Call.Route; empty for
	// Engine.Once and Do, whose scopes would make unbounded metric labels.
	Route string
	// Transport names the transport of the call: "http" (Engine.Begin and
	// the adapters), "grpc" (grpcidem), or Call.Transport; empty for
	// Engine.Once and Do, and for events not about a call.
	Transport string
	// Code is the transport's answer to the call: an HTTP status, a gRPC
	// status code (where 0 is OK). It is 0 without a Transport, in an
	// OutcomeFallback, and when the call got none from idem: an
	// OutcomeStoreError under fail-open (the handler runs unprotected), an
	// HTTP handler's panic.
	Code int
	// Duration is the time from the start of the request to this outcome.
	Duration time.Duration
	// Breaker is the breaker's new state in an OutcomeBreaker event:
	// "closed", "open" or "half_open".
	Breaker string
	// Err is the store or validation error behind the outcome, if any; for
	// OutcomeStored, an error wrapping ErrLockLost if the response was
	// stored after the lock expired, or may have (no refresh confirmed it
	// for LockTTL).
	Err error
}

// MaskKey hides most of a key for logs: at most a third of it, and never
// more than 8 characters, stays, split between its ends (a UUID shows
// 550e****0000, a 9-character key 12****9); keys under 3 characters
// become ****.
func MaskKey(key string) string {
	n := min(8, len(key)/3)
	if n == 0 {
		return "****"
	}
	head := (n + 1) / 2
	return key[:head] + "****" + key[len(key)-(n-head):]
}

// SlogObserver returns an Observer that logs every event to l with the key
// masked: store errors, lost locks, a body read before the middleware or
// a request through it twice (server bugs, answered 500) and a tiered
// store's second record of a key (it ran twice) at Error level;
// conflicts, mismatches, invalid keys, too large or unreadable bodies,
// quota refusals, responses stored after the lock expired (or may have),
// the breaker's changes and the tiered store's other fallbacks at Warn;
// the rest at Debug. The scope is logged as it is: an application that
// scopes by a secret (an API key) should scope by its hash.
func SlogObserver(l *slog.Logger) func(Event) {
	return func(e Event) {
		level := slog.LevelDebug
		switch e.Outcome {
		case OutcomeStoreError, OutcomeLockLost:
			level = slog.LevelError
		case OutcomeBreaker, OutcomeFallback:
			level = slog.LevelWarn
			if errors.Is(e.Err, errDurableRecord) { // the key ran twice
				level = slog.LevelError
			}
		case OutcomeConflict, OutcomeMismatch, OutcomeInvalidKey, OutcomeTooLarge, OutcomeBadBody, OutcomeQuota:
			level = slog.LevelWarn
			if e.Transport == "http" && e.Code >= 500 {
				level = slog.LevelError
			}
		case OutcomeStored:
			if e.Err != nil {
				level = slog.LevelWarn
			}
		}
		ctx := e.Context
		if ctx == nil {
			ctx = context.Background()
		}
		if !l.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{
			slog.String("outcome", e.Outcome.String()),
			slog.String("key", MaskKey(e.Key)),
			slog.String("method", e.Method),
			slog.String("route", e.Route),
			slog.Duration("duration", e.Duration),
		}
		if e.Scope != "" {
			attrs = append(attrs, slog.String("scope", e.Scope))
		}
		if e.Outcome == OutcomeBreaker {
			attrs = append(attrs, slog.String("breaker", e.Breaker))
		}
		switch {
		case e.Outcome == OutcomeFallback: // a store's event: no answer of the call's
			if e.Transport != "" {
				attrs = append(attrs, slog.String("transport", e.Transport))
			}
		case e.Transport != "":
			attrs = append(attrs, slog.String("transport", e.Transport), slog.Int("code", e.Code))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.Any("error", e.Err))
		}
		l.LogAttrs(ctx, level, "idempotency", attrs...)
	}
}
