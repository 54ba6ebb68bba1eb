package idemprom

import (
	"context"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

// InstrumentStore returns s measured by c (instrument.Store): the duration
// and the failures (instrument.Failed) of each call, and
// idempotency_inflight_requests, the locks that s handed to this process
// and that were not completed or released yet. The result implements
// core.Waiter, core.Admin and core.TxStore if s does.
func (c *Collector) InstrumentStore(s core.Store) core.Store {
	return instrument.Store(s, c.observeStore)
}

func (c *Collector) observeStore(_ context.Context, op instrument.Op, d time.Duration, err error, held int) {
	m := c.ops[op]
	m.duration.Observe(d.Seconds())
	if instrument.Failed(err) {
		m.errors.Inc()
	}
	if held != 0 {
		c.inflight.Add(float64(held))
	}
}
