package core

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Sealer encrypts the records the Engine stores (Config.Sealer), so that a
// store and its operators see ciphertext. Package seal has one: AES-256-GCM
// under rotating keys named by id.
type Sealer interface {
	// Seal encrypts plaintext and authenticates it with additionalData,
	// under a key it names by keyID (1 to 255 bytes).
	Seal(ctx context.Context, plaintext, additionalData []byte) (keyID string, sealed []byte, err error)
	// Open returns the plaintext that Seal sealed under keyID with
	// additionalData, or an error if the key is unknown or sealed or
	// additionalData differ.
	Open(ctx context.Context, keyID string, sealed, additionalData []byte) (plaintext []byte, err error)
}

// recordSealed is the first byte of a sealed record, whose times and key
// id are in clear, then the sealed record of version recordVersion. See
// docs/design.md, "Encryption at rest".
const recordSealed byte = 2

// sealedAD starts a sealed record's additional data; the store key and
// the record's clear times follow, so that a record moved to another key
// (another scope, client key or route) or given other times does not open.
const sealedAD = "idem sealed record\x00"

// errNoSealer reports a sealed record met without Config.Sealer.
var errNoSealer = errors.New("sealed, and no Sealer to open it")

// sealRecord returns the sealed form of plain, the encoding of rec, under
// the store key id.
func sealRecord(ctx context.Context, s Sealer, id string, rec *Record, plain []byte) ([]byte, error) {
	head := sealedTimes(make([]byte, 0, 64), unixNano(rec.RequestedAt), unixNano(rec.CompletedAt), unixNano(rec.ExpiresAt))
	keyID, sealed, err := s.Seal(ctx, plain, sealedAAD(id, head))
	switch {
	case err != nil:
		return nil, fmt.Errorf("idem: seal: %w", err)
	case keyID == "" || len(keyID) > 255:
		return nil, fmt.Errorf("idem: seal: key id of %d bytes, want 1 to 255", len(keyID))
	}
	b := make([]byte, 0, len(head)+1+len(keyID)+len(sealed))
	b = append(b, head...)
	b = appendString(b, keyID)
	return append(b, sealed...), nil
}

// sealedTimes appends the clear start of a sealed record: its version and
// times, in unix nanoseconds.
func sealedTimes(b []byte, requested, completed, expires int64) []byte {
	b = append(b, recordSealed)
	b = binary.AppendVarint(b, requested)
	b = binary.AppendVarint(b, completed)
	return binary.AppendVarint(b, expires)
}

func sealedAAD(id string, head []byte) []byte {
	b := make([]byte, 0, len(sealedAD)+binary.MaxVarintLen64+len(id)+len(head))
	b = append(b, sealedAD...)
	b = appendString(b, id)
	return append(b, head...)
}

// sealedParts splits a sealed record: its clear times (with the version
// byte), key id and sealed bytes.
func sealedParts(data []byte) (head []byte, keyID string, sealed []byte, err error) {
	d := decoder{b: data, budget: len(data)}
	d.byte()
	d.varint()
	d.varint()
	d.varint()
	head = data[:len(data)-len(d.b)]
	keyID = d.string()
	switch {
	case d.err != nil:
		return nil, "", nil, d.err
	case keyID == "":
		return nil, "", nil, fmt.Errorf("%w: sealed without a key id", ErrCorruptRecord)
	}
	return head, keyID, d.b, nil
}

// decodeSealed fills the clear fields of a sealed record: its times and
// SealedBy.
func (rec *Record) decodeSealed(data []byte) error {
	head, keyID, _, err := sealedParts(data)
	if err != nil {
		return err
	}
	d := decoder{b: head[1:]}
	rec.RequestedAt = fromUnixNano(d.varint())
	rec.CompletedAt = fromUnixNano(d.varint())
	rec.ExpiresAt = fromUnixNano(d.varint())
	rec.SealedBy = keyID
	return nil
}

// OpenRecord decodes data, a record as a Store keeps it under the store
// key id: a sealed record is opened with s first (DecodeRecord alone
// returns only its times and SealedBy). A record that does not open, or
// that is sealed while s is nil, is an error wrapping ErrCorruptRecord;
// one stored in clear decodes as with DecodeRecord.
func OpenRecord(ctx context.Context, s Sealer, id string, data []byte) (*Record, error) {
	rec := &Record{}
	if err := rec.open(ctx, s, id, data); err != nil {
		return nil, err
	}
	return rec, nil
}

// open decodes data into rec, which must be zero, opening it with s if it
// is sealed.
func (rec *Record) open(ctx context.Context, s Sealer, id string, data []byte) error {
	if len(data) == 0 || data[0] != recordSealed {
		return rec.decode(data)
	}
	head, keyID, sealed, err := sealedParts(data)
	if err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("%w: %w (key %q)", ErrCorruptRecord, errNoSealer, keyID)
	}
	plain, err := s.Open(ctx, keyID, sealed, sealedAAD(id, head))
	if err != nil {
		return fmt.Errorf("%w: does not open with key %q: %w", ErrCorruptRecord, keyID, err)
	}
	if len(plain) == 0 || plain[0] != recordVersion {
		return fmt.Errorf("%w: sealed content of an unknown version", ErrCorruptRecord)
	}
	if err := rec.decode(plain); err != nil {
		return err
	}
	rec.SealedBy = keyID
	return nil
}

// errStoredInClear is the error of a record or checkpoint stored in clear
// that a Sealer refuses (Config.ClearRecordsUntil).
var errStoredInClear = fmt.Errorf("%w: stored in clear while records are sealed (Config.ClearRecordsUntil)", ErrCorruptRecord)

// refuseClear returns errStoredInClear if data, a record or a checkpoint,
// is stored in clear while the Engine seals and no longer accepts clear
// ones; nil otherwise.
func (e *Engine) refuseClear(data []byte) error {
	if e.cfg.Sealer == nil || len(data) > 0 && data[0] == recordSealed || time.Now().Before(e.cfg.ClearRecordsUntil) {
		return nil
	}
	return errStoredInClear
}

// unstorable ends a lease whose record cannot be stored (not sealed, its
// keys out of reach; more headers than DecodeRecord takes; a code it
// refuses) as if the store had failed to take it: the work ran, so the lock
// is left to expire rather than let a retry run it again; with a TxStore,
// the transaction is rolled back and the result must not be delivered.
func (l *Lease) unstorable(ctx context.Context, err error) error {
	l.ev.Outcome, l.ev.Err = OutcomeStoreError, err
	if l.tx == nil {
		l.e.observe(l.ev, l.start)
		return nil
	}
	l.tx.Rollback(ctx) //nolint:errcheck // the seal's error says it
	l.e.observe(l.ev, l.start)
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
}

// sealedStepAD starts a sealed checkpoint's additional data; the store key
// and the step's name follow. A sealed checkpoint is recordSealed, the key
// id, then the sealer's output: JSON never starts with that byte.
const sealedStepAD = "idem sealed step\x00"

// sealStep returns the sealed form of a checkpoint of step under the store
// key id, or data itself without a Sealer.
func sealStep(ctx context.Context, s Sealer, id, step string, data []byte) ([]byte, error) {
	if s == nil {
		return data, nil
	}
	keyID, sealed, err := s.Seal(ctx, data, stepAAD(id, step))
	switch {
	case err != nil:
		return nil, fmt.Errorf("idem: seal: %w", err)
	case keyID == "" || len(keyID) > 255:
		return nil, fmt.Errorf("idem: seal: key id of %d bytes, want 1 to 255", len(keyID))
	}
	b := appendString(append(make([]byte, 0, 2+len(keyID)+len(sealed)), recordSealed), keyID)
	return append(b, sealed...), nil
}

// openStep returns the checkpoint data of step under the store key id,
// opened with s if it is sealed, or an error wrapping ErrCorruptRecord.
func openStep(ctx context.Context, s Sealer, id, step string, data []byte) ([]byte, error) {
	if len(data) == 0 || data[0] != recordSealed {
		return data, nil
	}
	d := decoder{b: data[1:], budget: len(data)}
	keyID := d.string()
	switch {
	case d.err != nil:
		return nil, d.err
	case s == nil:
		return nil, fmt.Errorf("%w: %w (key %q)", ErrCorruptRecord, errNoSealer, keyID)
	}
	plain, err := s.Open(ctx, keyID, d.b, stepAAD(id, step))
	if err != nil {
		return nil, fmt.Errorf("%w: does not open with key %q: %w", ErrCorruptRecord, keyID, err)
	}
	return plain, nil
}

func stepAAD(id, step string) []byte {
	b := append(make([]byte, 0, len(sealedStepAD)+len(id)+len(step)+8), sealedStepAD...)
	return appendString(appendString(b, id), step)
}
