// Package admin lets operators inspect and repair the keys of an idem store
// (a core.Admin: the memory, Redis and PostgreSQL stores): the operations of
// the idemctl command, and Handler, which serves them over HTTP behind an
// authorizer of the application's.
//
// A key is named as the Engine stores it: by scope, client key and, for an
// Engine with Config.ScopeRoute, route (Target), or by its store key (the
// ID that InFlight lists). Inspect never shows a stored body unless asked.
// See ExampleHandler.
package admin

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/idem-go/idem/core"
)

// Errors of Target.StoreKey.
var (
	// ErrNoKey reports a Target without a key or an ID.
	ErrNoKey = errors.New("admin: give a key (with its scope, and route if the engine joins it) or an id")
	// ErrBadTarget reports a Target with both a key and an ID, or an ID
	// that is not a store key (64 lowercase hex digits).
	ErrBadTarget = errors.New("admin: bad target")
)

// Statuses of a Key.
const (
	StatusCompleted = "completed" // a stored result, replayed to retries
	StatusInFlight  = "in_flight" // locked: a request is running (or died holding the lock)
)

// Target names a key.
type Target struct {
	Scope string // the Engine's Config.Scope of the request (the examples: X-User-ID)
	Key   string // the client's Idempotency-Key, unquoted
	Route string // the route template, only if the Engine sets Config.ScopeRoute
	ID    string // the store key instead of Scope, Key and Route
}

// StoreKey returns the key the store keeps t under: ID, or core.ID of
// Scope, Key and Route.
func (t Target) StoreKey() (string, error) {
	switch {
	case t.ID != "" && (t.Key != "" || t.Scope != "" || t.Route != ""):
		return "", fmt.Errorf("%w: an id, or a scope, key and route, not both", ErrBadTarget)
	case t.ID != "":
		if !isStoreKey(t.ID) {
			return "", fmt.Errorf("%w: id %q is not 64 lowercase hex digits", ErrBadTarget, t.ID)
		}
		return t.ID, nil
	case t.Key == "":
		return "", ErrNoKey
	}
	return core.ID(t.Scope, t.Key, t.Route), nil
}

func isStoreKey(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Key is what an operator sees of one key. Times are zero when unknown;
// Size is the stored body's, in bytes (0 while in flight, and for a sealed
// record not opened; the record's own when it does not decode or open).
type Key struct {
	ID          string              `json:"id"`
	Status      string              `json:"status"`
	Scope       string              `json:"scope,omitempty"`
	Key         string              `json:"key,omitempty"`
	Code        int                 `json:"code,omitempty"`   // the stored status code
	Created     time.Time           `json:"created,omitzero"` // the first request's arrival
	Completed   time.Time           `json:"completed,omitzero"`
	LockedAt    time.Time           `json:"locked_at,omitzero"`
	AgeSeconds  float64             `json:"age_seconds,omitempty"` // of the lock
	Expires     time.Time           `json:"expires,omitzero"`      // of the record or the lock
	Size        int64               `json:"size"`
	BodyOmitted bool                `json:"body_omitted,omitempty"` // too large to store: Size is the original's
	Header      map[string][]string `json:"header,omitempty"`       // only when asked for the body
	Body        string              `json:"body,omitempty"`         // only when asked
	BodyBase64  bool                `json:"body_base64,omitempty"`  // Body is base64: not UTF-8
	Error       string              `json:"error,omitempty"`        // the record does not decode, does not open, or is in clear under a Sealer
	// SealedBy is the id of the key that sealed the record
	// (core.Config.Sealer). Without the keys, only it and the times show.
	SealedBy string `json:"sealed_by,omitempty"`
}

// KeyList is the JSON of a list of keys.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// Inspect returns what store holds under id (see Target.StoreKey), or an
// error wrapping core.ErrNotFound. The stored headers and body are left out
// unless withBody. A record sealed by an Engine's core.Config.Sealer is
// opened with sealer; without it (nil), only its times and SealedBy show.
// Given a sealer, a record stored in clear, which an Engine with a Sealer
// refuses past Config.ClearRecordsUntil, shows with an Error saying so.
func Inspect(ctx context.Context, store core.Admin, id string, withBody bool, sealer core.Sealer) (Key, error) {
	st, err := store.Inspect(ctx, id)
	if err != nil {
		return Key{}, err
	}
	return describe(ctx, st, time.Now(), withBody, sealer), nil
}

// InFlight returns up to limit keys in flight, the oldest first.
func InFlight(ctx context.Context, store core.Admin, limit int) ([]Key, error) {
	if limit <= 0 {
		return []Key{}, nil
	}
	locks, err := store.InFlight(ctx, limit)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	keys := make([]Key, len(locks))
	for i, st := range locks {
		keys[i] = describe(ctx, st, now, false, nil)
	}
	return keys, nil
}

// OldestInFlight returns the age of the oldest lock of store, zero if none
// (or if its age is unknown): the gauge of keys stuck in processing.
func OldestInFlight(ctx context.Context, store core.Admin) (time.Duration, error) {
	locks, err := store.InFlight(ctx, 1)
	if err != nil || len(locks) == 0 || locks[0].LockedAt.IsZero() {
		return 0, err
	}
	return max(time.Since(locks[0].LockedAt), 0), nil
}

// errClear is Key.Error of a record stored in clear, inspected with a Sealer.
const errClear = "stored in clear, not sealed: an Engine with a Sealer answers 503 for it (a record that does not open), " +
	"unless before its Config.ClearRecordsUntil"

func describe(ctx context.Context, st core.KeyState, now time.Time, withBody bool, sealer core.Sealer) Key {
	k := Key{ID: st.Key, Expires: st.Expires}
	if st.Record == nil {
		k.Status, k.LockedAt = StatusInFlight, st.LockedAt
		if !st.LockedAt.IsZero() {
			k.AgeSeconds = max(now.Sub(st.LockedAt), 0).Seconds()
		}
		return k
	}
	k.Status = StatusCompleted
	rec, err := core.DecodeRecord(st.Record)
	if err == nil && rec.SealedBy != "" {
		k.SealedBy, k.Created, k.Completed = rec.SealedBy, rec.RequestedAt, rec.CompletedAt
		if sealer == nil {
			return k
		}
		rec, err = core.OpenRecord(ctx, sealer, st.Key, st.Record)
	}
	if err != nil {
		k.Size, k.Error = int64(len(st.Record)), err.Error()
		return k
	}
	if sealer != nil && rec.SealedBy == "" {
		// The Engine with this Sealer refuses it as a record that does not
		// open (core.ErrCorruptRecord: 503), past Config.ClearRecordsUntil.
		k.Error = errClear
	}
	k.Scope, k.Key, k.Code = rec.Scope, rec.Key, rec.Code
	k.Created, k.Completed = rec.RequestedAt, rec.CompletedAt
	k.Size, k.BodyOmitted = int64(len(rec.Body)), rec.BodyOmitted
	if rec.BodyOmitted {
		k.Size = rec.BodySize
	}
	if withBody {
		k.Header = rec.Header
		if utf8.Valid(rec.Body) {
			k.Body = string(rec.Body)
		} else {
			k.Body, k.BodyBase64 = base64.StdEncoding.EncodeToString(rec.Body), true
		}
	}
	return k
}
