package core

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// DoOptions configures Do. Every field is optional.
type DoOptions struct {
	// Args are fn's arguments: the SHA-256 of their JSON is the call's
	// fingerprint, so a call with the same key and other Args gets
	// ErrKeyReused. Default: none; any call with the key matches.
	Args any
	// TTL is how long the result is kept, at least a second (Do refuses
	// less). Default: Config.ResponseTTL.
	TTL time.Duration
	// Marshal and Unmarshal encode the result in the store. Default:
	// encoding/json. Unmarshal must not keep its bytes, which may be the
	// store's (encoding/json copies them).
	Marshal   func(any) ([]byte, error)
	Unmarshal func([]byte, any) error
}

// Codes of the records Do stores: a result, or a permanent error's message.
const (
	doResult    = 200
	doPermanent = 400
)

// Do runs fn at most once per (scope, key) and stores its result: the first
// call runs fn, and later calls get the stored result, with replayed true,
// without running fn. A call while another runs fn waits up to Config.Wait,
// then returns ErrInFlight. An error of fn is returned and not stored, so a
// later call runs fn again, unless it is wrapped with Permanent: then its
// message is stored, and later calls get an error of that message with
// replayed true (a transient error is never replayed).
//
// fn's context carries the key: Step and DerivedKey work inside it. A result
// whose encoding is over Config.MaxStoredBodyBytes (or fails, or does not
// decode into T) is returned, and stored as a permanent error saying so: fn
// ran, and later calls get that error rather than a second run. With the
// store failing and Config.FailClosed off, fn runs unprotected; with it on,
// or with the store busy (ErrStoreBusy), Do returns an error wrapping
// ErrStoreUnavailable.
// With a TxStore, fn writes through the transaction of its context, and a
// commit that fails is such an error too: the result is not returned (a
// permanent error commits with fn's writes).
func Do[T any](ctx context.Context, e *Engine, scope, key string, fn func(context.Context) (T, error), opts ...DoOptions) (result T, replayed bool, err error) {
	var o DoOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	marshal, unmarshal := o.Marshal, o.Unmarshal
	if marshal == nil {
		marshal = json.Marshal
	}
	if unmarshal == nil {
		unmarshal = json.Unmarshal
	}
	if key == "" {
		return result, false, fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if o.TTL != 0 && o.TTL < time.Second {
		// A bare number is nanoseconds (TTL: 86400): the result would be
		// gone before any retry, which would run fn again.
		return result, false, fmt.Errorf("idem: DoOptions.TTL of %v: under a second", o.TTL)
	}
	c := &Call{Context: ctx, Key: key, Scope: scope, Method: "do", TTL: o.TTL}
	if o.Args != nil {
		b, err := json.Marshal(o.Args)
		if err != nil {
			return result, false, fmt.Errorf("idem: fingerprinting Do's Args: %w", err)
		}
		c.Fingerprint = sha256.Sum256(b)
	}
	// Only Do's own records replay, decoded before the replay is reported:
	// the same scope and key used by Once, by another transport, or with
	// another T is a corrupt record to Do.
	a := answers{check: func(rec *Record) error {
		switch {
		case rec.Code == doPermanent:
			return nil
		case rec.Code != doResult:
			return fmt.Errorf("code %d, not Do's", rec.Code)
		}
		if err := unmarshal(rec.Body, &result); err != nil {
			return fmt.Errorf("decoding the result: %w", err)
		}
		return nil
	}}
	l, rec, err := e.acquire(c, scope, time.Now(), &a, &Lease{}) // ScopeRoute joins the scope again, as it always has
	switch {
	case err != nil:
		var zero T // not what a corrupt record decoded to
		return zero, false, err
	case rec != nil && rec.Code == doPermanent:
		return result, true, Permanent(errors.New(string(rec.Body)))
	case rec != nil:
		return result, true, nil
	}
	defer l.Release(0, errAborted) // a panic of fn
	result, err = fn(l.NewContext(ctx))
	var p *permanentError
	switch {
	case errors.As(err, &p):
		if cerr := l.Complete(&Record{Code: doPermanent, Body: e.message(err.Error())}); cerr != nil {
			return result, false, cerr
		}
		return result, false, err
	case err != nil:
		l.Release(0, err)
		return result, false, err
	}
	stored := &Record{Code: doResult}
	var merr error
	switch stored.Body, merr = marshal(result); {
	case merr != nil:
		stored = &Record{Code: doPermanent, Body: e.message("idem: Do's result did not encode: " + merr.Error())}
	case len(stored.Body) > e.cfg.MaxStoredBodyBytes:
		stored = &Record{Code: doPermanent, Body: e.message(fmt.Sprintf("idem: Do's result was %d bytes, over MaxStoredBodyBytes", len(stored.Body)))}
	default:
		// A result that does not decode into T (an interface, a MarshalJSON
		// without its UnmarshalJSON) would be a corrupt record to every
		// later call.
		if uerr := unmarshal(stored.Body, new(T)); uerr != nil {
			stored = &Record{Code: doPermanent, Body: e.message("idem: Do's result does not decode: " + uerr.Error())}
		}
	}
	if err := l.Complete(stored); err != nil {
		var zero T
		return zero, false, err
	}
	return result, false, nil
}

// message is a permanent error's message as Do stores it: its first
// MaxStoredBodyBytes bytes, not cut in the middle of a character.
func (e *Engine) message(msg string) []byte {
	if n := e.cfg.MaxStoredBodyBytes; len(msg) > n {
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	return []byte(msg)
}

// Permanent marks err as final for Do: its message (its first
// Config.MaxStoredBodyBytes bytes) is stored and returned to later calls
// with the same key, which do not run fn again. It returns nil for a nil
// err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }
