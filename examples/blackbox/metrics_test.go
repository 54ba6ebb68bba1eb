package blackbox

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var routeLabel = regexp.MustCompile(`[{,]route="([^"]*)"`)

// Every example serves GET /metrics, where each outcome of a scripted
// sequence of requests is counted exactly.
func TestExamplesMetrics(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			s := start(t, build(t, fw))
			order := `{"item": "pen", "qty": 1}`
			key := newKey(t)
			wantStatus(t, "first", s.post("erin", key, order), http.StatusCreated)
			wantStatus(t, "replay", s.post("erin", key, order), http.StatusCreated)
			wantStatus(t, "replay", s.post("erin", key, order), http.StatusCreated)
			wantStatus(t, "other body", s.post("erin", key, `{"item": "ink", "qty": 1}`), http.StatusUnprocessableEntity)
			wantStatus(t, "bad key", s.post("erin", "a, b", order), http.StatusBadRequest)
			slow := newKey(t)
			results := duplicates(s.post, "erin", slow, `{"item": "clock", "qty": 1, "delay_ms": 300}`)
			wantStatus(t, "duplicate in flight", <-results, http.StatusConflict)
			wantStatus(t, "first of the slow pair", <-results, http.StatusCreated)
			// Keyed requests to fifty paths no route matches: whatever the
			// adapter sees of them, they add at most one route label value.
			for i := range 50 {
				if r := s.send(http.MethodPost, "/nowhere/"+strconv.Itoa(i), "erin", newKey(t), order); r.status < 400 || r.status >= 500 {
					t.Fatalf("POST to an unrouted path: %d %s", r.status, r.body)
				}
			}

			r := s.do(mustRequest(http.MethodGet, s.url+"/metrics"))
			if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
				t.Fatalf("GET /metrics = %d %s", r.status, r.header.Get("Content-Type"))
			}
			for outcome, n := range map[string]string{"stored": "2", "replay": "2", "mismatch": "1", "invalid_key": "1", "conflict": "1"} {
				line := `idempotency_requests_total{method="POST",outcome="` + outcome + `",route="/orders"} ` + n
				if !strings.Contains(string(r.body), line+"\n") {
					t.Errorf("/metrics lacks %s:\n%s", line, grep(string(r.body), "idempotency_requests_total"))
				}
			}
			if !strings.Contains(string(r.body), "idempotency_inflight_requests 0\n") {
				t.Errorf("/metrics: %s", grep(string(r.body), "idempotency_inflight_requests"))
			}
			routes := map[string]bool{}
			for _, m := range routeLabel.FindAllStringSubmatch(string(r.body), -1) {
				routes[m[1]] = true
			}
			delete(routes, "/orders")
			if len(routes) > 1 {
				t.Errorf("/metrics has %d route values beside /orders, want at most one: %v", len(routes), routes)
			}
		})
	}
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
