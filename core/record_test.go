package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func sampleRecord() Record {
	now := time.Unix(1795000000, 123456789)
	return Record{
		Key:         "550e8400-e29b-41d4-a716-446655440000",
		Scope:       "tenant-7",
		Fingerprint: sha256.Sum256([]byte("request")),
		Code:        201,
		Header:      http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/1"}, "X-Multi": {"a", "b"}},
		Body:        []byte(`{"id":1}`),
		RequestedAt: now,
		CompletedAt: now.Add(150 * time.Millisecond),
		ExpiresAt:   now.Add(24 * time.Hour),
	}
}

func TestRecordRoundTrip(t *testing.T) {
	omitted := sampleRecord()
	omitted.Body, omitted.BodyOmitted, omitted.BodySize, omitted.BodySHA256 = nil, true, 5<<20, sha256.Sum256([]byte("big"))
	empty := Record{Code: 204}
	for name, rec := range map[string]Record{"full": sampleRecord(), "omitted": omitted, "empty": empty} {
		p, err := DecodeRecord(rec.appendBinary(nil))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := *p
		for _, ts := range []*time.Time{&got.RequestedAt, &got.CompletedAt, &got.ExpiresAt} {
			if !ts.IsZero() {
				*ts = ts.In(time.Local)
			}
		}
		want := rec
		for _, ts := range []*time.Time{&want.RequestedAt, &want.CompletedAt, &want.ExpiresAt} {
			if !ts.IsZero() {
				*ts = time.Unix(0, ts.UnixNano())
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", name, got, want)
		}
	}
}

func TestRecordRejectsCorruptData(t *testing.T) {
	rec := sampleRecord()
	data := rec.appendBinary(nil)
	cases := map[string][]byte{
		"empty":          nil,
		"other version":  append([]byte{9}, data[1:]...),
		"unknown flags":  append([]byte{recordVersion, 0x80}, data[2:]...),
		"trailing bytes": append(append([]byte{}, data...), 0),
		"json":           []byte(`{"status":201}`),
	}
	for i := 1; i < len(data); i++ {
		cases[fmt.Sprintf("truncated at %d", i)] = data[:i]
	}
	for _, code := range []int{1000, 1 << 20} {
		r := sampleRecord()
		r.Code = code
		cases[fmt.Sprintf("code %d", code)] = r.appendBinary(nil)
	}
	for name, b := range cases {
		_, err := DecodeRecord(b)
		if !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("%s: err = %v, want ErrCorruptRecord", name, err)
		}
	}
}

func FuzzRecordDecode(f *testing.F) {
	rec := sampleRecord()
	data := rec.appendBinary(nil)
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Add([]byte{recordVersion, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{})
	for _, b := range corruptRecords(4 << 10) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRecord(data)
		if err != nil {
			return
		}
		if _, cost := r.sizes(); cost > decodeBudget(len(data)) {
			t.Fatalf("decoded a record costing %d bytes from %d bytes", cost, len(data))
		}
		// Whatever decodes encodes back, within the size sizes promises,
		// to a record that decodes the same.
		again := r.appendBinary(nil)
		if size, _ := r.sizes(); len(again) > size || len(again) < size-5*binary.MaxVarintLen64 {
			t.Fatalf("record encoded in %d bytes, sizes said %d (exact but for its numbers)", len(again), size)
		}
		r2, err := DecodeRecord(again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if r2.Code != r.Code || !bytes.Equal(r2.Body, r.Body) || r2.Key != r.Key || len(r2.Header) != len(r.Header) {
			t.Fatalf("re-decoded record differs: %+v vs %+v", r2, r)
		}
	})
}
