package pgtest_test

import (
	"testing"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// A store's or an adapter's integration test on PostgreSQL, each subtest
// in a schema of its own.
func ExampleNewStore() {
	testConformance := func(t *testing.T) {
		idemtest.TestStore(t, pgtest.NewStore)
	}
	_ = testConformance
}
