package clientgone_test

import (
	"errors"
	"io"
	"testing"

	"github.com/idem-go/idem/internal/clientgone"
)

func TestWrote(t *testing.T) {
	var s clientgone.State
	if n, err := s.Wrote(4, nil, true); n != 4 || err != nil || !s.Sending() {
		t.Fatalf("client there: %d, %v, sending %v; want 4, nil, true", n, err, s.Sending())
	}
	if n, err := s.Wrote(4, io.ErrClosedPipe, true); n != 4 || err != nil || s.Sending() {
		t.Fatalf("first failed write, body stored: %d, %v, sending %v; want 4, nil, false", n, err, s.Sending())
	}
	if n, err := s.Wrote(4, nil, false); n != 0 || !errors.Is(err, clientgone.ErrGone) {
		t.Fatalf("client gone, body past what is stored: %d, %v; want 0, ErrGone", n, err)
	}
}
