package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// errNoCheckpoints is Step's error on a store that is not a Checkpointer.
var errNoCheckpoints = errors.New("idem: the store keeps no step checkpoints (core.Checkpointer)")

// steps are a lease's checkpoints, read from the store by its first Step:
// while the lease holds the key, only its own steps write any.
type steps struct {
	mu   sync.Mutex
	done map[string][]byte // nil until read
}

// Step runs fn as the step called name of the work that runs under ctx's
// key (an HTTP or gRPC handler, Do, Once), once per key: its result is
// checkpointed in the store, fenced by the key's lock. When the work runs
// again under the key (after a crash, a 5xx, a lost lock), a step that
// finished returns its checkpoint, decoded, without running fn; a step
// whose fn failed was not checkpointed and runs again. Names must be unique
// within the work, and UTF-8 without NUL bytes. A checkpoint is bound to
// the fingerprint of the request that wrote it: under the key, a request
// of another fingerprint (another body, other Do Args) gets an error
// wrapping ErrKeyReused from Step rather than that request's result.
//
// Checkpoints are JSON, kept for the key's TTL and dropped once the work's
// result is stored. With a TxStore, each step runs in a transaction of its
// own, which fn writes through (its context carries it) and which commits
// with the checkpoint. Outside a key, or when the work runs unprotected
// after a store failure, fn just runs.
//
// Step fails if the store is not a Checkpointer (nor, with a TxStore, its
// Tx a StepTx), if it cannot read the checkpoints, or if it cannot write
// fn's (wrapping ErrLockLost if another call may hold the key): fn's effect
// happened, and a run again runs it again, which a downstream key
// (DerivedKey) makes harmless. Once the work under the key has ended (a
// goroutine of the handler outlived it), Step fails with ErrLockLost
// without running fn. A result that JSON cannot encode (a NaN, a
// channel), or whose JSON does not decode into T (an interface, a
// MarshalJSON without its UnmarshalJSON), would fail every run again: its
// error is Permanent, which Do stores. Docs: docs/steps.md.
func Step[T any](ctx context.Context, name string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	if !ok || !l.Protected() {
		return fn(ctx)
	}
	if !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		// PostgreSQL's text refuses it, after fn ran: refused on every store.
		return zero, fmt.Errorf("idem: step %q not run: a step's name must be UTF-8 without NUL bytes", name)
	}
	cp := l.e.checkpointer()
	st := stepTx(l.tx)
	if cp == nil || l.tx != nil && st == nil {
		return zero, fmt.Errorf("%w: step %q", errNoCheckpoints, name)
	}
	data, found, err := l.checkpoint(cp, name)
	if err != nil {
		return zero, err
	}
	if found {
		var v T
		if err = l.e.refuseClear(data); err == nil {
			data, err = openStep(l.ctx, l.e.cfg.Sealer, l.id, name, data)
		}
		if err == nil {
			data, err = l.unbindStep(data)
		}
		if err != nil {
			return zero, fmt.Errorf("idem: checkpoint of step %q: %w", name, err)
		}
		if err := json.Unmarshal(data, &v); err != nil {
			return zero, fmt.Errorf("%w: checkpoint of step %q: %w", ErrCorruptRecord, name, err)
		}
		return v, nil
	}
	if !l.live() {
		// The work under the key has ended (a goroutine of the handler's
		// outlived it): its lock is gone, or a transaction that ended holds
		// it, and no checkpoint of fn could be saved.
		return zero, fmt.Errorf("idem: step %q not run: the work under its key has ended: %w", name, ErrLockLost)
	}
	var (
		v      T
		fnErr  error
		ran    bool
		stored []byte // the checkpoint as stored: sealed with a Sealer
	)
	run := func(ctx context.Context) ([]byte, error) {
		ran = true
		if v, fnErr = fn(ctx); fnErr != nil {
			return nil, fnErr
		}
		if data, err = json.Marshal(v); err != nil {
			// fn's effect happened and nothing can checkpoint it: Do keeps
			// the error rather than run fn again on every retry.
			return nil, Permanent(fmt.Errorf("idem: step %q: encoding its result: %w", name, err))
		}
		if err = json.Unmarshal(data, new(T)); err != nil {
			// Nor can a checkpoint that every retry would refuse as
			// corrupt (an interface, a MarshalJSON without its
			// UnmarshalJSON): said now, on the run that can store it.
			return nil, Permanent(fmt.Errorf("idem: step %q: its result does not decode: %w", name, err))
		}
		stored, err = sealStep(ctx, l.e.cfg.Sealer, l.id, name, l.bindStep(data))
		return stored, err
	}
	if st != nil {
		_, err = st.RunStep(ctx, name, l.ttl, run)
	} else if _, err = run(ctx); err == nil {
		sc, cancel := l.storeContext()
		err = cp.SaveStep(sc, l.id, l.token, name, stored, l.ttl)
		cancel()
	}
	switch {
	case fnErr != nil:
		return v, fnErr
	case err != nil && !ran:
		return zero, fmt.Errorf("idem: step %q not run: %w", name, err)
	case err != nil:
		return zero, fmt.Errorf("idem: step %q ran, its checkpoint was not saved: %w", name, err)
	}
	l.steps.mu.Lock()
	l.steps.done[name] = stored // read again as the store's would be
	l.steps.mu.Unlock()
	return v, nil
}

// stepBound starts a checkpoint bound to the fingerprint of the request
// that wrote it: this byte, the fingerprint's 32 bytes, then the result's
// JSON (which never starts with this byte, nor with recordSealed).
const stepBound byte = 3

// bindStep returns a step's result bound to the lease's fingerprint, so
// that another request under the key (another body, other Args), run after
// this one failed, does not take its checkpoints for its own. A lease
// without a fingerprint (Do without Args, Once), which matches any call,
// writes the result as is.
func (l *Lease) bindStep(data []byte) []byte {
	if l.fingerprint == ([32]byte{}) {
		return data
	}
	b := make([]byte, 0, 1+len(l.fingerprint)+len(data))
	b = append(b, stepBound)
	b = append(b, l.fingerprint[:]...)
	return append(b, data...)
}

// unbindStep returns the result of a checkpoint that bindStep wrote, or an
// error wrapping ErrKeyReused if another request wrote it. A checkpoint
// written without a fingerprint is returned as is.
func (l *Lease) unbindStep(data []byte) ([]byte, error) {
	if len(data) == 0 || data[0] != stepBound {
		return data, nil
	}
	n := 1 + len(l.fingerprint)
	switch {
	case len(data) < n:
		return nil, fmt.Errorf("%w: a checkpoint of %d bytes", ErrCorruptRecord, len(data))
	case [32]byte(data[1:n]) != l.fingerprint:
		return nil, fmt.Errorf("%w: the checkpoint is another request's", ErrKeyReused)
	}
	return data[n:], nil
}

// checkpoint returns the checkpoint of step, reading the key's checkpoints
// from cp the first time.
func (l *Lease) checkpoint(cp Checkpointer, step string) ([]byte, bool, error) {
	st := &l.steps
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done == nil {
		sc, cancel := l.storeContext()
		done, err := cp.LoadSteps(sc, l.id)
		cancel()
		if err != nil {
			return nil, false, fmt.Errorf("idem: step %q: reading the checkpoints: %w", step, err)
		}
		if done == nil {
			done = make(map[string][]byte)
		}
		st.done = done
	}
	data, ok := st.done[step]
	return data, ok, nil
}

// stepTx returns tx as a StepTx, looking through transactions that wrap
// another (Unwrap), or nil.
func stepTx(tx Tx) StepTx {
	st, _ := asTx[StepTx](tx)
	return st
}

// checkpointer returns the Engine's store as a Checkpointer, looking
// through stores that wrap another (Unwrap), or nil.
func (e *Engine) checkpointer() Checkpointer {
	cp, _ := find[Checkpointer](e.cfg.Store)
	return cp
}
