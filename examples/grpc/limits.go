package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/seal"
)

// limits sets cfg.FailClosed from IDEM_FAIL_CLOSED (a boolean: 1 or 0),
// its per-user quota from IDEM_QUOTA_INFLIGHT (keys in flight at once) and
// IDEM_QUOTA_PER_MINUTE (new keys per minute), and its Sealer from
// IDEM_SEAL_KEYS ("<id>:<base64 key>[,...]", the first primary), with the
// records stored in clear before replaying until IDEM_SEAL_CLEAR_UNTIL
// (RFC 3339), as the HTTP examples do.
func limits(cfg *core.Config, logger *slog.Logger) error {
	if s := os.Getenv("IDEM_FAIL_CLOSED"); s != "" {
		// 503 instead of running unprotected when the store fails. A value
		// that is not a boolean (yes, on) is refused rather than read as
		// false, which would run requests unprotected, twice on a retry, in
		// the outage it was set for.
		on, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("IDEM_FAIL_CLOSED=%q: want a boolean, 1 (503 when the store fails) or 0", s)
		}
		cfg.FailClosed = on
	}
	for _, v := range []struct {
		name string
		dst  *int
	}{{"IDEM_QUOTA_INFLIGHT", &cfg.Quota.InFlight}, {"IDEM_QUOTA_PER_MINUTE", &cfg.Quota.PerWindow}} {
		s := os.Getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q: want a number of keys, 0 for no bound", v.name, s)
		}
		*v.dst = n
	}
	if q := cfg.Quota; q.InFlight > 0 || q.PerWindow > 0 {
		cfg.Quota.Window = time.Minute
		logger.Info("quota per user", "in_flight", q.InFlight, "per_minute", q.PerWindow)
	}
	if spec, set := os.LookupEnv("IDEM_SEAL_KEYS"); set && spec == "" {
		// A secret that did not render: read as unset, every record would
		// be stored in clear, and refused by the instances that seal.
		return fmt.Errorf("IDEM_SEAL_KEYS is set but empty: want <id>:<base64 key>[,...], or unset it to store records in clear")
	}
	if os.Getenv("IDEM_SEAL_CLEAR_UNTIL") != "" && os.Getenv("IDEM_SEAL_KEYS") == "" {
		return fmt.Errorf("IDEM_SEAL_CLEAR_UNTIL needs IDEM_SEAL_KEYS: without keys every record is stored in clear")
	}
	if spec := os.Getenv("IDEM_SEAL_KEYS"); spec != "" {
		keys, err := seal.ParseKeys(spec)
		if err != nil {
			return fmt.Errorf("IDEM_SEAL_KEYS: %w", err)
		}
		cfg.Sealer = seal.New(keys)
		primary, _, _ := keys.Primary(context.Background())
		logger.Info("stored records sealed", "primary_key", primary)
		if until := os.Getenv("IDEM_SEAL_CLEAR_UNTIL"); until != "" {
			if cfg.ClearRecordsUntil, err = time.Parse(time.RFC3339, until); err != nil {
				return fmt.Errorf("IDEM_SEAL_CLEAR_UNTIL=%q: want an RFC 3339 time: %w", until, err)
			}
			logger.Info("records stored in clear replay until", "until", cfg.ClearRecordsUntil)
			if time.Until(cfg.ClearRecordsUntil) > 24*time.Hour {
				// The records stored before sealing have expired by then
				// (the examples keep core's 24 h ResponseTTL); until it, one
				// planted in clear by whoever can write to the store replays.
				logger.Warn("IDEM_SEAL_CLEAR_UNTIL is more than the records' 24 h TTL away: records in clear are accepted longer than needed",
					"until", cfg.ClearRecordsUntil)
			}
		}
	}
	return nil
}
