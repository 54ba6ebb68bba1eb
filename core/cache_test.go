package core

import (
	"bytes"
	"testing"
	"time"
)

func encoded(t *testing.T, body string, expires time.Time) []byte {
	t.Helper()
	return (&Record{Code: 201, Body: []byte(body), ExpiresAt: expires}).appendBinary(nil)
}

func TestReplayCache(t *testing.T) {
	now := time.Unix(1000, 0)
	rec := func(body string, ttl time.Duration) []byte { return encoded(t, body, now.Add(ttl)) }
	a, b, c := rec("a", time.Minute), rec("b", time.Minute), rec("c", time.Second)
	per := int64(len("ka")+len(a)) + cacheOverhead
	cache := newReplayCache(2 * per) // room for two
	cache.now = func() time.Time { return now }

	cache.put("ka", a, 0)
	cache.put("kb", b, 0)
	if !bytes.Equal(cache.get("ka"), a) || !bytes.Equal(cache.get("kb"), b) {
		t.Fatal("records not cached")
	}
	cache.get("ka")       // ka is now the most recent
	cache.put("kc", c, 0) // kb, the least recent, goes
	if cache.get("kb") != nil || cache.get("ka") == nil || cache.get("kc") == nil {
		t.Fatal("not least recently used first out")
	}
	if cache.size > cache.max {
		t.Fatalf("size %d over the bound %d", cache.size, cache.max)
	}
	now = now.Add(time.Second) // kc expires now: never served
	if cache.get("kc") != nil {
		t.Fatal("an expired record was served")
	}
	gen := cache.generation()
	cache.drop("ka")
	if cache.get("ka") != nil {
		t.Fatal("a dropped record was served")
	}
	// A record read before the drop (a purge racing the store call) is
	// not cached.
	cache.put("ka", a, gen)
	if cache.get("ka") != nil {
		t.Fatal("a record read before a purge was cached")
	}
	gen = cache.generation()
	cache.put("big", rec(string(make([]byte, 3*per)), time.Minute), gen)
	cache.put("old", rec("x", -time.Second), gen)
	cache.put("junk", []byte("not a record"), gen)
	if cache.get("big") != nil || cache.get("old") != nil || cache.get("junk") != nil || len(cache.items) != 0 || cache.size != 0 {
		t.Fatalf("kept a record too large, expired or corrupt: %d items, %d bytes", len(cache.items), cache.size)
	}
}

func TestRecordExpiry(t *testing.T) {
	at := time.Unix(1795000000, 42)
	got, ok := recordExpiry(encoded(t, "body", at))
	if !ok || !got.Equal(at) {
		t.Fatalf("recordExpiry = %v, %v; want %v", got, ok, at)
	}
	full := encoded(t, "body", at)
	for i := range 40 {
		if _, ok := recordExpiry(full[:i]); ok && i < 2+32+4 {
			t.Fatalf("a record cut at %d bytes has an expiry", i)
		}
	}
}
