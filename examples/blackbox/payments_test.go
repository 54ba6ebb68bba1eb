package blackbox

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// examples/payments refuses an account with a NUL (400, before charging),
// and answers a failure of its provider with a fixed message, the error
// (the provider's address) in its log only.
func TestPaymentsErrors(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() // no provider there
	l.Close()
	s := start(t, build(t, "payments"), "PROVIDER_URL="+down)
	pay := func(body string) result {
		t.Helper()
		return s.send(http.MethodPost, "/payments", "payer", newKey(t), body)
	}
	if r := pay(`{"amount": 500, "account": "a\u0000b"}`); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "without NUL") {
		t.Fatalf("account with a NUL: %d %s, want 400", r.status, r.body)
	}
	r := pay(`{"amount": 500, "account": "a1"}`)
	if r.status != http.StatusBadGateway || strings.TrimSpace(string(r.body)) != `{"error":"the payment provider failed"}` {
		t.Fatalf("provider down: %d %s, want 502 with a fixed message", r.status, r.body)
	}
}
