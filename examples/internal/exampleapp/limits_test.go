package exampleapp

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// TestLimitsSealClearUntil: IDEM_SEAL_CLEAR_UNTIL needs keys and an RFC 3339
// time, sets Config.ClearRecordsUntil, and is warned about when it lies
// beyond the 24 h the records stored in clear can still live.
func TestLimitsSealClearUntil(t *testing.T) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	keys := "k1:" + base64.StdEncoding.EncodeToString(secret)
	const warning = "IDEM_SEAL_CLEAR_UNTIL is more than"
	for _, tc := range []struct {
		name, keys, until string
		err, warn         bool
	}{
		{name: "within a day", keys: keys, until: time.Now().Add(time.Hour).Format(time.RFC3339)},
		{name: "three days away", keys: keys, until: time.Now().Add(72 * time.Hour).Format(time.RFC3339), warn: true},
		{name: "not a time", keys: keys, until: "tomorrow", err: true},
		{name: "without keys", until: time.Now().Add(time.Hour).Format(time.RFC3339), err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("IDEM_SEAL_KEYS", tc.keys)
			t.Setenv("IDEM_SEAL_CLEAR_UNTIL", tc.until)
			var logs bytes.Buffer
			a := &App{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			var cfg core.Config
			err := a.limits(&cfg)
			if (err != nil) != tc.err {
				t.Fatalf("limits: %v, want an error: %v", err, tc.err)
			}
			if tc.err {
				return
			}
			if want, _ := time.Parse(time.RFC3339, tc.until); !cfg.ClearRecordsUntil.Equal(want) {
				t.Errorf("ClearRecordsUntil = %v, want %v", cfg.ClearRecordsUntil, want)
			}
			if got := strings.Contains(logs.String(), warning); got != tc.warn {
				t.Errorf("warned: %v, want %v; logs:\n%s", got, tc.warn, &logs)
			}
		})
	}
}

// TestLimitsFailClosed: IDEM_FAIL_CLOSED is a boolean; anything else is
// refused at start rather than read as false, which would run requests
// unprotected when the store fails.
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
		{value: "on", err: true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv("IDEM_FAIL_CLOSED", tc.value)
			a := &App{Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
			var cfg core.Config
			err := a.limits(&cfg)
			switch {
			case (err != nil) != tc.err:
				t.Fatalf("IDEM_FAIL_CLOSED=%q: %v, want an error: %v", tc.value, err, tc.err)
			case cfg.FailClosed != tc.failClosed:
				t.Fatalf("IDEM_FAIL_CLOSED=%q: FailClosed = %v, want %v", tc.value, cfg.FailClosed, tc.failClosed)
			}
		})
	}
}

// TestLimitsSealKeysSetButEmpty: IDEM_SEAL_KEYS set to nothing (a secret
// that did not render) is refused at start, not read as unset, which would
// store every record in clear.
func TestLimitsSealKeysSetButEmpty(t *testing.T) {
	t.Setenv("IDEM_SEAL_KEYS", "")
	a := &App{Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
	var cfg core.Config
	if err := a.limits(&cfg); err == nil || !strings.Contains(err.Error(), "IDEM_SEAL_KEYS") {
		t.Fatalf("limits: %v, want an error naming IDEM_SEAL_KEYS; Sealer %v", err, cfg.Sealer)
	}
}
