//go:build !integration

package pgstore_test

import "testing"

// TestIntegration stands for the tests that need a PostgreSQL (conformance,
// round trips, janitor, several processes, restarts): they build only with
// the integration tag.
func TestIntegration(t *testing.T) {
	t.Skip("needs PostgreSQL at 127.0.0.1:5432 (database test): run make test-integration, or go test -tags integration")
}
