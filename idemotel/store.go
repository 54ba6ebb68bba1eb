package idemotel

import (
	"context"
	"errors"
	"time"

	"github.com/idem-go/idem/core"
)

// InstrumentStore returns s measured by t (core.InstrumentStore): the
// duration and the failures of each call, and idempotency.inflight_requests,
// the locks that s handed to this process and that were not completed or
// released yet. The result implements core.Waiter and core.Admin if s does.
func (t *Telemetry) InstrumentStore(s core.Store) core.Store {
	return core.InstrumentStore(s, t.observeStore)
}

func (t *Telemetry) observeStore(ctx context.Context, op core.StoreOp, d time.Duration, err error, held int) {
	opts := t.ops[op]
	t.storeDur.Record(ctx, d.Seconds(), opts.record...)
	if err != nil && !errors.Is(err, core.ErrInFlight) && !errors.Is(err, core.ErrLockLost) {
		t.storeErrs.Add(ctx, 1, opts.add...)
	}
	if held != 0 {
		t.inflight.Add(ctx, int64(held))
	}
}
