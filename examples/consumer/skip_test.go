//go:build !integration

package main

import "testing"

// TestConsumerKilled needs Redis and PostgreSQL: it builds only with the
// integration tag.
func TestConsumerKilled(t *testing.T) {
	t.Skip("needs Redis at 127.0.0.1:6379 and PostgreSQL at 127.0.0.1:5432: run make test-integration, or go test -tags integration")
}
