package idemkey

import (
	"strings"
	"testing"
	"time"
)

func TestValidators(t *testing.T) {
	v4 := "9b2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d"
	v1 := "c232ab00-9414-11ec-b3c8-9f6bdeced846"
	tests := []struct {
		name  string
		fn    func(string) error
		key   string
		valid bool
	}{
		{"uuid v4", UUID, v4, true},
		{"uuid v1", UUID, v1, true},
		{"uuid upper", UUID, strings.ToUpper(v4), true},
		{"uuid braces", UUID, "{" + v4 + "}", false},
		{"uuid urn", UUID, "urn:uuid:" + v4, false},
		{"uuid short", UUID, v4[:35], false},
		{"uuid bad hex", UUID, "zb2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d", false},
		{"v4 only: v4", UUIDv4, v4, true},
		{"v4 only: v1", UUIDv4, v1, false},
		{"token", Token, "order_2026-11-22_abc", true},
		{"token 15", Token, strings.Repeat("a", 15), false},
		{"token 255", Token, strings.Repeat("a", 255), true},
		{"token 256", Token, strings.Repeat("a", 256), false},
		{"token dot", Token, "order.2026.11.22.abc", false},
		{"structured", ValidateStructured, "u-42:create-payment:inv_7:1795000000000", true},
		{"structured 3 parts", ValidateStructured, "u-42:create-payment:1795000000000", false},
		{"structured empty user", ValidateStructured, ":op:res:1795000000000", false},
		{"structured bad time", ValidateStructured, "u:op:res:yesterday", false},
		{"structured bad char", ValidateStructured, "u 1:op:res:1795000000000", false},
	}
	for _, tt := range tests {
		if err := tt.fn(tt.key); (err == nil) != tt.valid {
			t.Errorf("%s: validate(%q) = %v, want valid=%v", tt.name, tt.key, err, tt.valid)
		}
	}
}

func TestStructuredRoundTrip(t *testing.T) {
	k := Structured{UserID: "user-42", Operation: "create_payment", ResourceID: "inv.7", ClientTime: time.UnixMilli(1795000000123)}
	s := k.String()
	if s != "user-42:create_payment:inv.7:1795000000123" {
		t.Fatalf("String() = %q", s)
	}
	got, err := ParseStructured(s)
	if err != nil {
		t.Fatal(err)
	}
	if got.UserID != k.UserID || got.Operation != k.Operation || got.ResourceID != k.ResourceID || !got.ClientTime.Equal(k.ClientTime) {
		t.Fatalf("ParseStructured(%q) = %+v, want %+v", s, got, k)
	}
}
