package fiberv3idem_test

import (
	"testing"

	"github.com/idem-go/idem/fiberv3idem"
)

func TestNilEngine(t *testing.T) {
	defer func() {
		if r := recover(); r != "fiberv3idem: Config.Engine is required" {
			t.Errorf("New without an Engine: recovered %v", r)
		}
	}()
	fiberv3idem.New()
}
