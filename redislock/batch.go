package redislock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching bounds: batches on their way to one Redis node at a time, and
// calls in one batch. Measured with make loadtest (32 connections, two
// cores): one or two batches in flight gave the same throughput, four less
// (smaller batches, more system calls); two keep a slow batch, such as one
// carrying a large record, from holding up every other request.
const (
	maxBatchesInFlight = 2
	maxBatchLen        = 100
)

// errNoReply is the error of a batched script whose batch failed before
// its replies were read: a hook that panicked.
var errNoReply = errors.New("redislock: no reply: the script's batch failed")

// A batcher sends the scripts that concurrent requests run while its
// batches are on their way to Redis as one pipeline: one write and one read
// for all of them, sent by one of the callers, in its own goroutine (the
// batcher has none). A script run while fewer than maxBatchesInFlight are
// on their way goes out at once, alone, as without a batcher: a request is
// never held back to wait for others, only behind the round trips already
// under way.
type batcher struct {
	scripter redis.Scripter         // runs a script alone
	pipeline func() redis.Pipeliner // starts a batch

	mu       sync.Mutex
	inFlight int     // batches on their way
	queue    []*call // the calls of the next batch
}

// A call is a script run through a batcher that waits for a batch.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any

	cmd  *redis.Cmd    // the reply, once done is closed and unless lead is set
	lead []*call       // the batch this call is to send, set under batcher.mu
	done chan struct{} // closed once cmd or lead is set
}

// run runs script, alone if fewer than maxBatchesInFlight batches are on
// their way, else in the next batch.
//
// A call waiting for its batch gives up when ctx ends: if the batch has not
// been sent, the script is dropped from it and never runs; if it has, the
// script may run, as one whose caller gives up after sending it on the
// plain client may.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	b.mu.Lock()
	if b.inFlight < maxBatchesInFlight {
		b.inFlight++
		b.mu.Unlock()
		defer b.next()
		return script.Run(ctx, b.scripter, keys, args...)
	}
	c := &call{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	select {
	case <-c.done:
	case <-ctx.Done():
		b.mu.Lock()
		i := slices.Index(b.queue, c)
		if i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
		}
		lead := c.lead != nil
		b.mu.Unlock()
		if !lead {
			return errCmd(ctx, ctx.Err())
		}
		// This call was picked to send the next batch at the moment its
		// context ended: the batch's other calls still want it sent.
	}
	if c.lead != nil {
		defer b.next()
		b.send(c.lead)
	}
	return c.cmd
}

// next hands the first calls of the queue, if any, to the first of them to
// send as a batch, on the lane of the batch that just came back; or frees
// that lane.
func (b *batcher) next() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	n := min(len(b.queue), maxBatchLen)
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	batch[0].lead = batch
	b.mu.Unlock()
	close(batch[0].done)
}

// send runs batch as one pipeline, and closes the done channel of each of
// its calls but the first, whose caller is the one sending it.
func (b *batcher) send(batch []*call) {
	var sent bool
	defer func() {
		for _, c := range batch[1:] {
			if !sent { // a hook panicked
				c.cmd = errCmd(c.ctx, errNoReply)
			}
			close(c.done)
		}
	}()
	ctx, cancel := batchContext(batch)
	defer cancel()
	pipe := b.pipeline()
	for _, c := range batch {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	pipe.Exec(ctx) //nolint:errcheck // each call reads its own reply
	// A node whose script cache lacks a script (its first run there, a
	// SCRIPT FLUSH, a failover): load it with EVAL, as Script.Run does.
	var again bool
	for _, c := range batch {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
			again = true
		}
	}
	if again {
		pipe.Exec(ctx) //nolint:errcheck // as above
	}
	sent = true
}

// batchContext returns the context a batch is sent with: the values of its
// first call's (which hooks, such as tracing, see), no cancellation (each
// caller stops waiting when its own context ends, the others still want
// their replies), and the latest of the calls' deadlines, or none if one of
// them has none.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

// errCmd returns a Cmd that failed with err.
func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
