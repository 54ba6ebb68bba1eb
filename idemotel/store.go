package idemotel

import (
	"context"
	"errors"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

// InstrumentStore returns s measured by t (instrument.Store): the duration
// and the failures (instrument.Failed) of each call, and
// idempotency.inflight_requests, the locks that s handed to this process
// and that were not completed or released yet. The result implements
// core.Waiter, core.Admin and core.TxStore if s does.
func (t *Telemetry) InstrumentStore(s core.Store) core.Store {
	return instrument.Store(s, t.observeStore)
}

func (t *Telemetry) observeStore(ctx context.Context, op instrument.Op, d time.Duration, err error, held int) {
	if instrument.Failed(err) {
		t.storeDur.Record(ctx, d.Seconds(), t.failed[op][storeErrorType(err)].record...)
		t.storeErrs.Add(ctx, 1, t.ops[op].add...)
	} else {
		t.storeDur.Record(ctx, d.Seconds(), t.ops[op].record...)
	}
	if held != 0 {
		t.inflight.Add(ctx, int64(held))
	}
}

// storeErrorTypes are the values of error.type on a failed store call's
// duration: a timeout, a full memory store, a record that does not decode,
// or anything else (OpenTelemetry's "_OTHER").
var storeErrorTypes = [...]string{"_OTHER", "timeout", "store_full", "corrupt_record"}

func storeErrorType(err error) int {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return 1
	case errors.Is(err, core.ErrStoreFull):
		return 2
	case errors.Is(err, core.ErrCorruptRecord):
		return 3
	}
	return 0
}
