package core

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
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

func TestValidators(t *testing.T) {
	v4 := "9b2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d"
	v1 := "c232ab00-9414-11ec-b3c8-9f6bdeced846"
	tests := []struct {
		name  string
		fn    KeyValidator
		key   string
		valid bool
	}{
		{"uuid v4", ValidateUUID, v4, true},
		{"uuid v1", ValidateUUID, v1, true},
		{"uuid upper", ValidateUUID, strings.ToUpper(v4), true},
		{"uuid braces", ValidateUUID, "{" + v4 + "}", false},
		{"uuid urn", ValidateUUID, "urn:uuid:" + v4, false},
		{"uuid short", ValidateUUID, v4[:35], false},
		{"uuid bad hex", ValidateUUID, "zb2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d", false},
		{"v4 only: v4", ValidateUUIDv4, v4, true},
		{"v4 only: v1", ValidateUUIDv4, v1, false},
		{"token", ValidateToken, "order_2026-11-22_abc", true},
		{"token 15", ValidateToken, strings.Repeat("a", 15), false},
		{"token 255", ValidateToken, strings.Repeat("a", 255), true},
		{"token 256", ValidateToken, strings.Repeat("a", 256), false},
		{"token dot", ValidateToken, "order.2026.11.22.abc", false},
		{"structured", ValidateStructuredKey, "u-42:create-payment:inv_7:1795000000000", true},
		{"structured 3 parts", ValidateStructuredKey, "u-42:create-payment:1795000000000", false},
		{"structured empty user", ValidateStructuredKey, ":op:res:1795000000000", false},
		{"structured bad time", ValidateStructuredKey, "u:op:res:yesterday", false},
		{"structured bad char", ValidateStructuredKey, "u 1:op:res:1795000000000", false},
	}
	for _, tt := range tests {
		if err := tt.fn(tt.key); (err == nil) != tt.valid {
			t.Errorf("%s: validate(%q) = %v, want valid=%v", tt.name, tt.key, err, tt.valid)
		}
	}
}

func TestStructuredKeyRoundTrip(t *testing.T) {
	k := StructuredKey{UserID: "user-42", Operation: "create_payment", ResourceID: "inv.7", ClientTime: time.UnixMilli(1795000000123)}
	s := k.String()
	if s != "user-42:create_payment:inv.7:1795000000123" {
		t.Fatalf("String() = %q", s)
	}
	got, err := ParseStructuredKey(s)
	if err != nil {
		t.Fatal(err)
	}
	if got.UserID != k.UserID || got.Operation != k.Operation || got.ResourceID != k.ResourceID || !got.ClientTime.Equal(k.ClientTime) {
		t.Fatalf("ParseStructuredKey(%q) = %+v, want %+v", s, got, k)
	}
}

func TestKeyHeaders(t *testing.T) {
	e, err := New(Config{ValidateKey: ValidateToken})
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
	if _, _, err := e.Key(header{"X-Idempotency-Key": {"a", "b"}}); err == nil || !strings.Contains(err.Error(), "2 X-Idempotency-Key headers") {
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
