package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"testing"
)

// corruptRecords are records of about size bytes crafted to make a decoder
// allocate much more than they hold: counts that size maps and slices, and
// many small elements each costing more in memory than on the wire.
func corruptRecords(size int) map[string][]byte {
	prefix := func() []byte {
		b := append([]byte{recordVersion, 0}, make([]byte, 32)...)
		b = binary.AppendUvarint(b, 201)
		for range 3 {
			b = binary.AppendVarint(b, 1)
		}
		return append(b, 0, 0) // key and scope: empty
	}
	pad := func(b []byte) []byte { return append(b, make([]byte, size-len(b))...) }
	out := make(map[string][]byte)

	// Counts as large as the input allows, and as large as the decoder's
	// budget allows.
	for _, fit := range []string{"input", "budget"} {
		headers, values := size/5, size-64
		if fit == "budget" {
			headers, values = decodeBudget(size)/headerCost, decodeBudget(size)/valueCost-64
		}
		// A header count, then nothing valid.
		b := binary.AppendUvarint(prefix(), uint64(headers))
		out["header count/"+fit] = pad(b)

		// Headers with distinct short names and no values.
		for i := range min(headers, (size-len(b))/5) {
			b = append(b, 3, byte(i>>16), byte(i>>8), byte(i), 0)
		}
		out["headers/"+fit] = pad(b)

		// One header with many empty values.
		b = binary.AppendUvarint(append(prefix(), 1, 1, 'a'), uint64(values))
		out["values/"+fit] = pad(b)
	}
	return out
}

// TestDecodeRecordAllocationBounded decodes corrupt records of 1 MiB: the
// decoder allocates at most a small multiple of its input, however the
// counts inside it lie.
func TestDecodeRecordAllocationBounded(t *testing.T) {
	const size = 1 << 20
	for name, data := range corruptRecords(size) {
		var least uint64 = 1 << 62
		for range 3 { // the least of three runs: other goroutines allocate too
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			DecodeRecord(data) //nolint:errcheck // corrupt or not, the allocations are measured
			runtime.ReadMemStats(&after)
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		if least > 5*size {
			t.Errorf("%s: decoding %d bytes allocated %d bytes (%.1fx)", name, size, least, float64(least)/size)
		} else {
			t.Logf("%s: %.1fx", name, float64(least)/size)
		}
	}
}

// TestDecodeRecordManyHeaders: a record with hundreds of short headers
// decodes; one with more than its allocation bound allows is not stored by
// Lease.Complete (it would be a record no replay can read), nor one with a
// code DecodeRecord refuses, and the lock is left to expire as when the
// store fails to take a record: the work ran, and a retry must not run it
// again (it used to be released).
func TestDecodeRecordManyHeaders(t *testing.T) {
	header := func(n int) map[string][]string {
		h := make(map[string][]string, n)
		for i := range n {
			h["X-H-"+strconv.Itoa(i)] = []string{"v"}
		}
		return h
	}
	rec := sampleRecord()
	rec.Header = header(500)
	if _, err := DecodeRecord(rec.appendBinary(nil)); err != nil {
		t.Fatalf("500 headers: %v", err)
	}

	store := NewMemoryStore(0)
	var events []Event
	e, err := New(Config{Store: store, Observer: func(ev Event) { events = append(events, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rec  *Record
		want error
	}{
		{&Record{Code: 200, Header: header(5000)}, errHeadersTooMany},
		{&Record{Code: 1000}, errCodeRange},
		{&Record{Code: -1}, errCodeRange},
	} {
		key := fmt.Sprint("k", tc.rec.Code)
		l, _, err := e.Acquire(&Call{Key: key})
		if err != nil || l == nil {
			t.Fatalf("Acquire: %v, %v", l, err)
		}
		l.Complete(tc.rec)
		if last := events[len(events)-1]; last.Outcome != OutcomeStoreError || !errors.Is(last.Err, tc.want) {
			t.Fatalf("event %+v, want OutcomeStoreError: %v", last, tc.want)
		}
		if l, rec, err := e.Acquire(&Call{Key: key}); l != nil || rec != nil || !errors.Is(err, ErrInFlight) {
			t.Fatalf("retry: a lease %v, record %v, %v; want ErrInFlight (the lock left to expire)", l != nil, rec, err)
		}
	}
}

// allocated returns the bytes the heap gives one new(T): its size class,
// with the header that the runtime puts before an object over 512 bytes
// that holds pointers. The least of five counts: another goroutine's
// allocations can only add to one. They may add to all five (1 KiB a
// millisecond is enough), so a test compares it with the next size class.
func allocated[T any]() uint64 {
	const n = 1000
	sink := make([]*T, n)
	least := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range sink {
			sink[i] = new(T)
		}
		runtime.ReadMemStats(&after)
		least = min(least, (after.TotalAlloc-before.TotalAlloc)/n)
	}
	runtime.KeepAlive(sink)
	return least
}

// A Flight is allocated for every keyed request, a replay included: it
// stays within the runtime's 1152-byte size class (the next is 1280), its
// 8-byte header included.
func TestFlightSizeClass(t *testing.T) {
	if got := allocated[Flight](); got >= 1280 {
		t.Errorf("a Flight (%d bytes) takes %d bytes of heap, more than the 1152 of its size class", reflect.TypeFor[Flight]().Size(), got)
	}
}

// The memory store keeps an entry per key, live for as long as its record:
// it stays within the runtime's 128-byte size class (the next is 144).
func TestMemEntrySizeClass(t *testing.T) {
	if got := allocated[memEntry](); got >= 144 {
		t.Errorf("a memory store entry (%d bytes) takes %d bytes of heap, more than the 128 of its size class", reflect.TypeFor[memEntry]().Size(), got)
	}
}
