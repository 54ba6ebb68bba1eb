package core

import (
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The headers that the response's Connection header names are dropped:
// names in any case, with spaces and empty members around them, over
// several lines, and gRPC trailers judged by their base name.
func TestApplyPolicyConnection(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{Header: map[string][]string{
		"Connection":     {"keep-alive, x-hop", " ,X-OTHER-HOP , "},
		"X-Hop":          {"1"},
		"X-Other-Hop":    {"1"},
		":trailer:x-hop": {"1"},
		"X-Kept":         {"1"},
		":message":       {"m"},
	}}
	e.applyPolicy(rec)
	if got, want := slices.Sorted(maps.Keys(rec.Header)), []string{":message", "X-Kept"}; !slices.Equal(got, want) {
		t.Errorf("headers kept: %q, want %q", got, want)
	}
}

// BenchmarkApplyPolicyConnection compares the storage policy of a response
// of many headers, half of which its Connection header names, with
// net/http's writing of the same headers (bare). Matching every header
// against every name cost their product: 140 to 200 ms for these 4000
// headers, 0.025x bare; a set of the names, 0.85x.
func BenchmarkApplyPolicyConnection(b *testing.B) {
	e, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	h := make(http.Header)
	var named []string
	for i := range 4000 {
		name := "X-Header-" + strconv.Itoa(i)
		h[name] = []string{"1"}
		if i%2 == 0 {
			named = append(named, strings.ToLower(name))
		}
	}
	h["Connection"] = []string{strings.Join(named, ", ")}
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			if err := h.Write(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("connection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rec := &Record{Header: maps.Clone(h)}
			e.applyPolicy(rec)
			if len(rec.Header) != 2000 {
				b.Fatalf("%d headers kept, want 2000", len(rec.Header))
			}
		}
	})
}
