package blackbox

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// With IDEM_ADMIN_TOKEN set, every example serves the admin handler at
// /admin/idempotency/ behind that bearer token; without it, nothing there.
func TestExamplesAdmin(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			bin := build(t, fw)
			s := start(t, bin, "IDEM_ADMIN_TOKEN=s3cret")
			admin := func(method, op, token string, q url.Values) result {
				t.Helper()
				req := mustRequest(method, s.url+"/admin/idempotency/"+op+"?"+q.Encode())
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				return s.do(req)
			}
			order := `{"item": "map", "qty": 1}`
			key := newKey(t)
			target := url.Values{"scope": {"ada"}, "key": {key}}
			wantStatus(t, "order", s.post("ada", key, order), http.StatusCreated)

			for _, token := range []string{"", "wrong"} {
				if r := admin("GET", "inspect", token, target); r.status != http.StatusUnauthorized {
					t.Fatalf("inspect with token %q: %d %s", token, r.status, r.body)
				}
			}
			r := admin("GET", "inspect", "s3cret", target)
			var k struct {
				Status, Scope, Key string
				Code               int
			}
			if err := json.Unmarshal(r.body, &k); r.status != http.StatusOK || err != nil ||
				k.Status != "completed" || k.Scope != "ada" || k.Key != key || k.Code != http.StatusCreated {
				t.Fatalf("inspect: %d %s", r.status, r.body)
			}

			// A purge is refused while the key's request runs.
			slow := newKey(t)
			done := make(chan result, 1)
			go func() { done <- s.post("ada", slow, `{"item": "clock", "qty": 1, "delay_ms": 1000}`) }()
			slowTarget := url.Values{"scope": {"ada"}, "key": {slow}}
			for deadline := time.Now().Add(10 * time.Second); ; {
				r := admin("GET", "inspect", "s3cret", slowTarget)
				if r.status == http.StatusOK && strings.Contains(string(r.body), `"in_flight"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the slow order is not in flight: %d %s", r.status, r.body)
				}
				time.Sleep(10 * time.Millisecond) // another process: nothing to wait on but the API
			}
			if r := admin("GET", "inflight", "s3cret", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"in_flight"`) {
				t.Fatalf("inflight: %d %s", r.status, r.body)
			}
			if r := admin("POST", "purge", "s3cret", slowTarget); r.status != http.StatusConflict {
				t.Fatalf("purge in flight: %d %s", r.status, r.body)
			}
			wantStatus(t, "the slow order", <-done, http.StatusCreated)

			// After a purge, the same key creates an order again.
			before := s.count()
			if r := admin("POST", "purge", "s3cret", target); r.status != http.StatusOK {
				t.Fatalf("purge: %d %s", r.status, r.body)
			}
			again := s.post("ada", key, order)
			wantStatus(t, "order after purge", again, http.StatusCreated)
			if again.header.Get("X-Idempotency-Replay") != "" || s.count() != before+1 {
				t.Fatalf("order after purge: replay %q, orders %d → %d", again.header.Get("X-Idempotency-Replay"), before, s.count())
			}

			// Without the token in the environment, no admin handler.
			plain := start(t, bin)
			req := mustRequest("GET", plain.url+"/admin/idempotency/inspect?"+target.Encode())
			req.Header.Set("Authorization", "Bearer s3cret")
			if r := plain.do(req); r.status != http.StatusNotFound {
				t.Fatalf("inspect without IDEM_ADMIN_TOKEN: %d %s", r.status, r.body)
			}
		})
	}
}

// idem covers the order routes only, never the admin handler: an admin
// request with an Idempotency-Key refused for its token (401) is not stored
// and replayed to the same request with the token, nor is the admin's
// answer replayed to a request without it. examples/payments too: it mounts
// the admin handler beside a covered route.
func TestExamplesAdminNotCovered(t *testing.T) {
	for _, fw := range append(frameworks, "payments") {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			s := start(t, build(t, fw), "IDEM_ADMIN_TOKEN=s3cret")
			// The admin's request, with a key of its own as a client library
			// may add to every POST.
			admin := func(what, adminKey, token string, target url.Values, status int) result {
				t.Helper()
				req := mustRequest(http.MethodPost, s.url+"/admin/idempotency/purge?"+target.Encode())
				req.Header.Set("Idempotency-Key", adminKey)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				r := s.do(req)
				if r.status != status || r.header.Get("X-Idempotency-Replay") != "" {
					t.Fatalf("%s: %d (replay %q) %s, want %d and no replay", what, r.status, r.header.Get("X-Idempotency-Replay"), r.body, status)
				}
				return r
			}

			// A key no one sent: the purge runs and finds nothing (404).
			missing := url.Values{"scope": {"ada"}, "key": {newKey(t)}}
			adminKey := newKey(t)
			admin("purge without the token", adminKey, "", missing, http.StatusUnauthorized)
			admin("purge with the token", adminKey, "s3cret", missing, http.StatusNotFound)
			admin("purge without the token again", adminKey, "", missing, http.StatusUnauthorized)
			if fw == "payments" {
				return // no order to purge: its POST /payments charges a provider
			}

			// A completed order: the purge with the token runs, and the
			// order's key creates an order again.
			order, key := `{"item": "map", "qty": 1}`, newKey(t)
			wantStatus(t, "order", s.post("ada", key, order), http.StatusCreated)
			target := url.Values{"scope": {"ada"}, "key": {key}}
			adminKey = newKey(t)
			admin("purge without the token", adminKey, "", target, http.StatusUnauthorized)
			if r := admin("purge with the token", adminKey, "s3cret", target, http.StatusOK); !strings.Contains(string(r.body), `"purged":true`) {
				t.Fatalf("purge with the token: %s", r.body)
			}
			admin("purge without the token after the purge", adminKey, "", target, http.StatusUnauthorized)
			before := s.count()
			again := s.post("ada", key, order)
			wantStatus(t, "order after the purge", again, http.StatusCreated)
			if again.header.Get("X-Idempotency-Replay") != "" || s.count() != before+1 {
				t.Fatalf("order after the purge: replay %q, orders %d → %d", again.header.Get("X-Idempotency-Replay"), before, s.count())
			}
		})
	}
}
