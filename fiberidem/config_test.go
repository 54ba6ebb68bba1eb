package fiberidem_test

import (
	"testing"

	"github.com/idem-go/idem/fiberidem"
)

func TestNilEngine(t *testing.T) {
	defer func() {
		if r := recover(); r != "fiberidem: Config.Engine is required" {
			t.Errorf("New without an Engine: recovered %v", r)
		}
	}()
	fiberidem.New()
}
