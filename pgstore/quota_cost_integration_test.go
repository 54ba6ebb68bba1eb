//go:build integration

package pgstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestIntegrationQuotaAdmissionReads counts the rows an admission under a
// PerWindow quota reads: at most PerWindow of its scope's admissions in the
// window, none that left it (the janitor deletes those later) and none of
// other scopes. Each admission read all of its scope's rows: a scope's n-th
// admission in a window read n, and each refusal at least PerWindow.
func TestIntegrationQuotaAdmissionReads(t *testing.T) {
	t.Parallel()
	s, pool, schema := newStore(t, nil)
	ctx := context.Background()
	q := pgx.Identifier{schema, "idempotency_keys_quota"}.Sanitize()
	for _, rows := range []struct {
		scope, when string // SQL
		n           int
	}{
		{"'s'", "now() - interval '1 second'", 2000},                 // left the window, not swept yet
		{"'s'", "now() + interval '1 hour'", 2000},                   // in the window
		{"'other-' || g % 1000", "now() + interval '1 hour'", 20000}, // 20 in each of 1000 scopes
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+q+` (scope, token, until)
	SELECT `+rows.scope+`, $1 || '-' || g, `+rows.when+` FROM generate_series(1, $2) g`, rows.when, rows.n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+q); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		perWindow int
		ok        bool
	}{{100, false}, {1900, false}, {100000, true}} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan []byte
		err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) "+s.AdmitSQL(),
			"s", "a-key", "a-token", 0, tc.perWindow, time.Hour).Scan(&plan)
		tx.Rollback(ctx) //nolint:errcheck // nothing to keep
		if err != nil {
			t.Fatal(err)
		}
		var nodes []struct{ Plan planNode }
		if err := json.Unmarshal(plan, &nodes); err != nil || len(nodes) != 1 {
			t.Fatalf("plan %s: %v", plan, err)
		}
		read := nodes[0].Plan.read("idempotency_keys_quota")
		if want := min(tc.perWindow, 2000) + 1; read > want {
			t.Errorf("PerWindow %d: the admission read %d rows of the quota table, want at most %d", tc.perWindow, read, want)
		}
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Rows     int        `json:"Actual Rows"`
	Loops    int        `json:"Actual Loops"`
	Removed  int        `json:"Rows Removed by Filter"`
	Fetches  int        `json:"Heap Fetches"`
	Plans    []planNode `json:"Plans"`
}

// read returns the rows of relation that the scans under n read: those
// they returned and those their filters removed.
func (n planNode) read(relation string) int {
	r := 0
	if n.Relation == relation && strings.Contains(n.Type, "Scan") {
		r = (n.Rows + n.Removed) * max(n.Loops, 1)
	}
	for _, c := range n.Plans {
		r += c.read(relation)
	}
	return r
}
