package orders

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// Decode refuses with ErrInvalid what the service could not store: a NUL in
// item (PostgreSQL's text refuses it) and a qty outside 1..MaxQty (an
// integer column); the message says which field.
func TestDecode(t *testing.T) {
	for body, want := range map[string]string{
		`{"item": "book", "qty": 2}`:                         "",
		fmt.Sprintf(`{"item": "book", "qty": %d}`, MaxQty):   "",
		`{"item": "book", "qty": 0}`:                         "qty must be positive",
		`{"item": "book", "qty": -1}`:                        "qty must be positive",
		fmt.Sprintf(`{"item": "book", "qty": %d}`, MaxQty+1): "qty must be at most",
		`{"item": "book", "qty": 99999999999}`:               "qty must be at most",
		`{"item": "book", "qty": 99999999999999999999}`:      "invalid order: json",
		`{"item": "a\u0000b", "qty": 1}`:                     "item must not contain NUL",
		`{"item": "", "qty": 1}`:                             "item is required",
		`{"item": `:                                          "invalid order",
	} {
		_, err := Decode([]byte(body))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", body, err)
		case want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want ErrInvalid saying %q", body, err, want)
		}
	}
}

// ServerError logs the error and gives the client a fixed message; the
// simulated failure keeps its own.
func TestServerError(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	leak := errors.New(`ERROR: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)`)
	if got := ServerError(log, fmt.Errorf("insert: %w", leak)); got != InternalError {
		t.Errorf("ServerError = %q, want %q", got, InternalError)
	}
	if !strings.Contains(logs.String(), "SQLSTATE 22021") {
		t.Errorf("the error is not logged: %s", logs.String())
	}
	if got := ServerError(log, ErrBoom); got != ErrBoom.Error() {
		t.Errorf("ServerError(ErrBoom) = %q", got)
	}
}
