package main

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/idem-go/idem/core"
)

// TestLimitsFailClosed: IDEM_FAIL_CLOSED is a boolean, as in the HTTP
// examples; anything else is refused at start rather than read as false,
// which would run calls unprotected when the store fails.
func TestLimitsFailClosed(t *testing.T) {
	for _, tc := range []struct {
		value      string
		failClosed bool
		err        bool
	}{
		{value: "", failClosed: false},
		{value: "1", failClosed: true},
		{value: "0", failClosed: false},
		{value: "true", failClosed: true},
		{value: "yes", err: true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv("IDEM_FAIL_CLOSED", tc.value)
			var cfg core.Config
			err := limits(&cfg, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
			switch {
			case (err != nil) != tc.err:
				t.Fatalf("IDEM_FAIL_CLOSED=%q: %v, want an error: %v", tc.value, err, tc.err)
			case cfg.FailClosed != tc.failClosed:
				t.Fatalf("IDEM_FAIL_CLOSED=%q: FailClosed = %v, want %v", tc.value, cfg.FailClosed, tc.failClosed)
			}
		})
	}
}

// TestLimitsSealKeysSetButEmpty: IDEM_SEAL_KEYS set to nothing is refused
// at start, as in the HTTP examples, rather than store records in clear.
func TestLimitsSealKeysSetButEmpty(t *testing.T) {
	t.Setenv("IDEM_SEAL_KEYS", "")
	var cfg core.Config
	if err := limits(&cfg, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))); err == nil {
		t.Fatalf("limits: nil error, want one naming IDEM_SEAL_KEYS; Sealer %v", cfg.Sealer)
	}
}
