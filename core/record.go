package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// ErrCorruptRecord reports a stored record that cannot be decoded: truncated,
// of an unknown version, or not a record at all. The Engine treats it as a
// store error.
var ErrCorruptRecord = errors.New("idem: corrupt record")

// recordVersion is the first byte of every encoded record. A decoder rejects
// versions it does not know, so the format can change without misreading
// records written by an older release.
const recordVersion byte = 1

// Record is a completed call as the Engine stores it: what a replay
// answers with. Transports read it from Engine.Acquire, admin tools and
// stores from DecodeRecord. A replayed Record's Body and Header may share
// memory with the store and the replay cache: read them, never modify them.
//
// There is no "processing" record: a call in flight is represented by its
// lock alone, so a record always describes a finished result.
type Record struct {
	Key         string              // the client's key, trimmed and unquoted (as Event.Key)
	Scope       string              // the scope the key belongs to (tenant, user)
	Fingerprint [32]byte            // SHA-256 of the request
	Code        int                 // the result's code: an HTTP status (200 to 999), a gRPC code
	Header      map[string][]string // the stored response headers or metadata
	Body        []byte              // the stored body; empty when BodyOmitted

	// BodyOmitted is true when the body was larger than the configured limit:
	// only its size and SHA-256 are kept, in BodySize and BodySHA256, which
	// are unset otherwise.
	BodyOmitted bool
	BodySize    int64
	BodySHA256  [32]byte

	RequestedAt time.Time // when the first request arrived
	CompletedAt time.Time // when its response was stored
	ExpiresAt   time.Time // when the record expires

	// SealedBy is the id of the key that sealed the record (Config.Sealer),
	// or "". DecodeRecord fills only it and the times of a sealed record:
	// OpenRecord opens it.
	SealedBy string
}

// appendBinary appends r in the versioned binary format stores keep.
func (r *Record) appendBinary(b []byte) []byte {
	var flags byte
	if r.BodyOmitted {
		flags = 1
	}
	b = append(b, recordVersion, flags)
	b = append(b, r.Fingerprint[:]...)
	b = binary.AppendUvarint(b, uint64(r.Code))
	b = binary.AppendVarint(b, unixNano(r.RequestedAt))
	b = binary.AppendVarint(b, unixNano(r.CompletedAt))
	b = binary.AppendVarint(b, unixNano(r.ExpiresAt))
	b = appendString(b, r.Key)
	b = appendString(b, r.Scope)
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	for name, values := range r.Header {
		b = appendString(b, name)
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = appendString(b, v)
		}
	}
	if r.BodyOmitted {
		b = binary.AppendUvarint(b, uint64(r.BodySize))
		b = append(b, r.BodySHA256[:]...)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.Body)))
		b = append(b, r.Body...)
	}
	return b
}

// DecodeRecord decodes a record as a Store keeps it. Its Body aliases data,
// which must therefore not be modified while the record is in use. Of a
// sealed record it returns the times and SealedBy (see OpenRecord).
// Truncated, oversized or unknown input returns an error wrapping
// ErrCorruptRecord; it never panics, and allocates at most about four times
// len(data), plus 64 KiB, whatever the counts inside data claim.
func DecodeRecord(data []byte) (*Record, error) {
	rec := &Record{}
	if err := rec.decode(data); err != nil {
		return nil, err
	}
	return rec, nil
}

// decode decodes data into rec, which must be zero.
func (rec *Record) decode(data []byte) error {
	if len(data) > 0 && data[0] == recordSealed {
		return rec.decodeSealed(data)
	}
	d := decoder{b: data, budget: decodeBudget(len(data))}
	if v := d.byte(); v != recordVersion {
		if d.err != nil {
			return d.err
		}
		return fmt.Errorf("%w: unknown version %d", ErrCorruptRecord, v)
	}
	flags := d.byte()
	if flags&^1 != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrCorruptRecord, flags)
	}
	copy(rec.Fingerprint[:], d.bytes(32))
	code := d.uvarint()
	if d.err == nil && code > maxCode {
		return fmt.Errorf("%w: code %d", ErrCorruptRecord, code)
	}
	rec.Code = int(code)
	rec.RequestedAt = fromUnixNano(d.varint())
	rec.CompletedAt = fromUnixNano(d.varint())
	rec.ExpiresAt = fromUnixNano(d.varint())
	// The key, the scope and the headers are read twice: first to find
	// where they end and how many values they hold, then as substrings of
	// one string of their bytes, the values in one slice: two allocations
	// rather than one per string and one per header.
	first := d
	first.skip = true
	values := first.strings(&Record{}, nil)
	if first.err == nil {
		d.text, d.rest = string(d.b[:len(d.b)-len(first.b)]), len(d.b)
	}
	d.strings(rec, make([]string, values))
	if flags&1 != 0 {
		rec.BodyOmitted = true
		size := d.uvarint()
		if size > math.MaxInt64 {
			return fmt.Errorf("%w: body size %d", ErrCorruptRecord, size)
		}
		rec.BodySize = int64(size)
		copy(rec.BodySHA256[:], d.bytes(32))
	} else if body := d.bytes(d.count(1)); len(body) > 0 {
		rec.Body = body
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptRecord, len(d.b))
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func unixNano(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.After(maxUnixNano): // a TTL of centuries: UnixNano would wrap around
		return math.MaxInt64
	}
	return t.UnixNano()
}

// maxUnixNano is the latest time a record holds, in 2262.
var maxUnixNano = time.Unix(0, math.MaxInt64)

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// decoder reads the record format; the first error sticks and every later
// read returns zero values, so the caller checks once at the end.
//
// budget is how many bytes the decoder may still allocate: a corrupt record
// whose counts promise more than a few times its own size fails before the
// decoder allocates it (see decodeBudget).
type decoder struct {
	b      []byte
	err    error
	budget int

	skip bool   // string reads and returns ""
	text string // the strings' bytes from where d.b was rest bytes long
	rest int
}

// strings reads the key, the scope and the headers into rec, the values
// into values, which holds as many; it returns how many values it read.
// With d.skip it only counts them.
func (d *decoder) strings(rec *Record, values []string) int {
	rec.Key, rec.Scope = d.string(), d.string()
	n := d.count(2)
	if n == 0 || !d.spend(n*headerCost) {
		return 0
	}
	if !d.skip {
		rec.Header = make(map[string][]string, n)
	}
	read := 0
	for range n {
		name := d.string()
		m := d.cost(d.count(1), valueCost)
		read += m
		if d.skip {
			for range m {
				d.string()
			}
			continue
		}
		if m > len(values) {
			d.fail("header")
			return read
		}
		vs := values[:m:m]
		values = values[m:]
		for j := range vs {
			vs[j] = d.string()
		}
		rec.Header[name] = vs
	}
	return read
}

// What decoding costs in memory beyond the bytes of a string: a header in
// the map, a value's string header.
const (
	headerCost = 96
	valueCost  = 16
)

// decodeBudget bounds what decoding a record of n bytes may allocate: 4n,
// plus 64 KiB so that a small record may carry hundreds of short headers.
// Lease.Complete stores no record over it (errHeadersTooMany).
func decodeBudget(n int) int { return 4*n + 64<<10 }

// sizes returns at least the length of r's encoding (appendBinary: exact
// but for its numbers), and what decoding r allocates, as the decoder
// counts it.
func (r *Record) sizes() (encoded, decodeCost int) {
	str := func(s string) int { return uvarintLen(len(s)) + len(s) }
	encoded = 2 + 32 + 4*binary.MaxVarintLen64 + str(r.Key) + str(r.Scope) + uvarintLen(len(r.Header))
	if r.BodyOmitted {
		encoded += binary.MaxVarintLen64 + 32
	} else {
		encoded += uvarintLen(len(r.Body)) + len(r.Body)
	}
	decodeCost = len(r.Key) + len(r.Scope)
	for name, values := range r.Header {
		encoded += str(name) + uvarintLen(len(values))
		decodeCost += headerCost + len(name) + valueCost*len(values)
		for _, v := range values {
			encoded += str(v)
			decodeCost += len(v)
		}
	}
	return encoded, decodeCost
}

// uvarintLen is the length of n as a uvarint.
func uvarintLen(n int) int { return (bits.Len64(uint64(n)|1) + 6) / 7 }

// maxCode is the largest code a record holds: an HTTP status has three
// digits, a gRPC code fewer.
const maxCode = 999

// errCodeRange is why a result whose code is out of 0 to maxCode (a
// transport's bug) is not stored.
var errCodeRange = errors.New("idem: response not stored: code out of 0 to 999")

// errHeadersTooMany is why a result whose record would cost more than its
// decodeBudget is not stored: thousands of headers.
var errHeadersTooMany = errors.New("idem: response not stored: too many headers to decode within the record's allocation bound")

// spend takes n bytes from the budget, or fails and reports false.
func (d *decoder) spend(n int) bool {
	if d.err != nil {
		return false
	}
	if n > d.budget {
		d.err = fmt.Errorf("%w: more headers than its size allows", ErrCorruptRecord)
		d.b = nil
		return false
	}
	d.budget -= n
	return true
}

// cost spends n elements of size bytes each and returns n, or 0 if they do
// not fit in the budget.
func (d *decoder) cost(n, size int) int {
	if !d.spend(n * size) {
		return 0
	}
	return n
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrCorruptRecord, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("header")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bytes(n int) []byte {
	if n < 0 || len(d.b) < n {
		d.fail("field")
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length or element count and checks it against what is left:
// every element takes at least minSize bytes, so a corrupt count cannot make
// the decoder allocate more than the input's size.
func (d *decoder) count(minSize int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.b)/minSize) {
		d.fail("count")
		return 0
	}
	return int(v)
}

func (d *decoder) string() string {
	b := d.bytes(d.cost(d.count(1), 1))
	switch {
	case d.skip || len(b) == 0:
		return ""
	case d.text != "":
		at := d.rest - len(d.b) - len(b)
		return d.text[at : at+len(b)]
	}
	return string(b)
}
