//go:build integration

package grpcidem_test

import (
	"testing"

	"github.com/idem-go/idem/redislock/redistest"
)

// TestIntegrationServer runs the server's suite on the real Redis at
// IDEM_REDIS_ADDR (default 127.0.0.1:6379), each store under a key prefix
// of its own.
func TestIntegrationServer(t *testing.T) {
	testServer(t, redistest.NewStore)
}
