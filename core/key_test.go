package core

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idem-go/idem/idemkey"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		raw, want string
		ok        bool
	}{
		{"abc", "abc", true},
		{"with space and !#$%&'()*+-./:;<=>?@[]^_`{|}~", "with space and !#$%&'()*+-./:;<=>?@[]^_`{|}~", true},
		{`"quoted"`, "quoted", true},
		{`"esc\"aped\\"`, `esc"aped\`, true},
		{`"a,b"`, "a,b", true}, // a comma inside a String is the key's
		// Parameters of the Item are ignored: "k";p=1 is the key k.
		{`"k";p=1`, "k", true},
		{`"k"; p=1;q;r=?0;s="x;y";t=:aGk=:;u=tok/en;v=-1.5;w=*x`, "k", true},
		{`"k";P=1`, "", false},
		{`"k";p=`, "", false},
		{`"k";p=1.2345`, "", false},
		{`"k";p=:not base64!:`, "", false},
		{`"k" x`, "", false},
		{`"`, "", false},
		{`"abc`, "", false},
		{`"abc"x`, "", false},
		{`"bad\escape"`, "", false},
		{`"inner"quote"`, "", false},
		{"\"tab\tinside\"", "", false},
		// A proxy may join two field lines with a comma: two keys, 400.
		{"key-a, key-b", "", false},
		{`"key-a", "key-b"`, "", false},
		{"a,", "", false},
		{`""`, "", false},
		{"", "", false},
		{strings.Repeat("k", 255), strings.Repeat("k", 255), true},
		{strings.Repeat("k", 256), "", false},
		{"tab\there", "", false},
		{"nul\x00", "", false},
		{"del\x7f", "", false},
		{"ключ", "", false},
	}
	for _, tt := range tests {
		got, err := parseKey(tt.raw, 255)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseKey(%q) = %q, %v; want %q, ok=%v", tt.raw, got, err, tt.want, tt.ok)
		}
	}
}

// The error of a malformed key header says what is wrong without quoting
// the header: it is the problem detail and the Event's Err, logged where
// the key is masked (a 60 KB header made a 60 KB log line of it).
func TestParseKeyErrorQuotesNoHeader(t *testing.T) {
	junk := strings.Repeat("x", 64<<10)
	for _, raw := range []string{`"k"` + junk, `"k";p=1` + junk, `"k" ` + junk} {
		_, err := parseKey(raw, 255)
		if err == nil || len(err.Error()) > 100 {
			t.Errorf("parseKey(%.12q...) = %.100v (%d bytes); want a short error", raw, err, len(fmt.Sprint(err)))
		}
	}
}

// A key header costs no allocation per parameter or byte: a 1 MiB header
// of parameters once cost 262,145 allocations (an error made for each
// parameter), a 1 MiB quoted key 37 (a string built byte by byte). The
// limit is 2 MiB here, so that no error's allocations count.
func TestParseKeyAllocs(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		allocs    float64
	}{
		{"1 MiB of parameters", `"k"` + strings.Repeat(";a=1", 1<<18), 0},
		{"1 MiB of string parameters", `"k"` + strings.Repeat(`;a="x\\"`, 1<<17), 0},
		{"an escape", `"k\\"` + strings.Repeat(";a=1", 1<<18), 1}, // the key, built once
		{"a 1 MiB quoted key", `"` + strings.Repeat("k", 1<<20) + `"`, 0},
		{"a 1 MiB quoted key with escapes", `"` + strings.Repeat(`\"`, 1<<19) + `"`, 1}, // the key, built once
	} {
		if n := testing.AllocsPerRun(2, func() { parseKey(tc.raw, 2<<20) }); n > tc.allocs {
			t.Errorf("%s: %v allocations, want at most %v", tc.name, n, tc.allocs)
		}
	}
}

func TestKeyHeaders(t *testing.T) {
	e, err := New(Config{ValidateKey: idemkey.Token})
	if err != nil {
		t.Fatal(err)
	}
	valid := "abcdefghijklmnop"
	tests := []struct {
		name    string
		h       header
		key     string
		present bool
		err     bool
	}{
		{"none", header{}, "", false, false},
		{"main", header{"Idempotency-Key": {valid}}, valid, true, false},
		{"legacy", header{"X-Idempotency-Key": {valid}}, valid, true, false},
		{"both agree", header{"Idempotency-Key": {valid}, "X-Idempotency-Key": {valid}}, valid, true, false},
		{"both differ", header{"Idempotency-Key": {valid}, "X-Idempotency-Key": {valid + "x"}}, "", true, true},
		{"both agree once unquoted", header{"Idempotency-Key": {`"` + valid + `"`}, "X-Idempotency-Key": {valid}}, valid, true, false},
		{"legacy repeated", header{"Idempotency-Key": {valid}, "X-Idempotency-Key": {valid, valid}}, "", true, true},
		{"legacy an empty list", header{"Idempotency-Key": {valid}, "X-Idempotency-Key": {}}, valid, true, false}, // it panicked
		{"main an empty list", header{"Idempotency-Key": {}, "X-Idempotency-Key": {valid}}, valid, true, false},
		{"legacy invalid", header{"Idempotency-Key": {valid}, "X-Idempotency-Key": {valid + "\x01"}}, "", true, true},
		{"repeated", header{"Idempotency-Key": {valid, valid}}, "", true, true},
		{"empty", header{"Idempotency-Key": {""}}, "", true, true},
		{"validator", header{"Idempotency-Key": {"short"}}, "", true, true},
		{"spaces and tabs around", header{"Idempotency-Key": {"\t " + valid + " \t"}}, valid, true, false},
		{"tabs around a quoted key", header{"Idempotency-Key": {"\t\"" + valid + "\"\t"}}, valid, true, false},
		{"only spaces", header{"Idempotency-Key": {" \t "}}, "", true, true},
	}
	for _, tt := range tests {
		key, present, err := e.Key(tt.h)
		if present != tt.present || (err != nil) != tt.err || (!tt.err && key != tt.key) {
			t.Errorf("%s: key() = %q, %v, %v", tt.name, key, present, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: error %v does not wrap ErrInvalidKey", tt.name, err)
		}
	}
}

// The error names the header that was repeated, and the Problem's detail
// says what is wrong without the error's prefix.
func TestKeyErrors(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Key(header{"X-Idempotency-Key": {"a", "b"}}); err == nil || !strings.Contains(err.Error(), "2 values of X-Idempotency-Key") {
		t.Errorf("legacy header sent twice: %v, want an error naming X-Idempotency-Key", err)
	}
	_, resp := e.Begin(&Request{Method: http.MethodPost, Path: "/", Header: header{"Idempotency-Key": {"a\x01"}}})
	if resp == nil || resp.Problem == nil || resp.Problem.Detail != "byte 0x1 at 1: want printable ASCII" {
		t.Fatalf("Begin with a control character in the key: %+v, want the detail without a prefix", resp)
	}
}

// header is a HeaderGetter with exact names, for tests.
type header map[string][]string

func (h header) Get(name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h header) Values(name string) []string { return h[name] }

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"\`, "", "\x00", "ключ", strings.Repeat("x", 300), `"k";a=1;b="c";d=?1`, "a, b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		key, err := parseKey(raw, 255)
		if err != nil {
			return
		}
		if key == "" || len(key) > 255 {
			t.Fatalf("parseKey(%q) accepted %q", raw, key)
		}
		trimmed := strings.Trim(raw, " \t")
		if !strings.HasPrefix(trimmed, `"`) && strings.Contains(key, ",") {
			t.Fatalf("parseKey(%q) accepted a list as the key %q", raw, key)
		}
		// A String with parameters is the same key as without them.
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := parseKey(quoted+";p=1", 255); err != nil || again != key {
			t.Fatalf("parseKey(%q) = %q, %v; want %q", quoted+";p=1", again, err, key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("parseKey(%q) accepted byte %#x", raw, key[i])
			}
		}
	})
}
