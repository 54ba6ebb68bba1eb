//go:build integration

package redislock_test

import (
	"testing"

	"github.com/idem-go/idem/redislock/redistest"
)

// The raw bytes in a real Redis hold no plaintext of a sealed record.
func TestIntegrationSealedAtRest(t *testing.T) {
	c, prefix := redistest.Client(t)
	testSealedAtRest(t, c, prefix)
}
