package grpcidem

import (
	"context"
	"time"
)

// WithTestTime sets the client's clock, sleep and random source, for tests.
func WithTestTime(now func() time.Time, sleep func(context.Context, time.Duration) error, randN func(int64) int64) Option {
	return func(o *options) { o.now, o.sleep, o.randN = now, sleep, randN }
}

// Fingerprint is fingerprint, for tests.
var Fingerprint = fingerprint
