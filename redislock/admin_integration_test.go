//go:build integration

package redislock_test

import (
	"testing"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/redislock/redistest"
)

func TestIntegrationAdmin(t *testing.T) {
	idemtest.TestAdmin(t, redistest.NewStore)
}
