package core_test

import (
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

func TestMemoryStoreAdmin(t *testing.T) {
	idemtest.TestAdmin(t, func(*testing.T) core.Store { return core.NewMemoryStore(0) }, idemtest.FakeTime())
}
