//go:build integration

package redislock_test

import (
	"testing"

	"github.com/idem-go/idem/redislock/redistest"
)

func TestIntegrationPurgeInvalidatesCaches(t *testing.T) {
	c, prefix := redistest.Client(t)
	testPurgeInvalidatesCaches(t, c, prefix)
}
