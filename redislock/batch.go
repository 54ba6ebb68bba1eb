package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching bounds, per Redis node: batches on their way at a time, and the
// scripts and argument bytes of one batch (a batch takes one script over
// maxBatchBytes alone). Measured with make loadtest (32 connections, two
// cores): one or two batches in flight gave the same throughput, four less
// (smaller batches, more system calls); two keep a slow batch, such as one
// carrying large records, from holding up every other request.
const (
	maxBatchesInFlight = 2
	maxBatchLen        = 100
	maxBatchBytes      = 1 << 20
)

// errNoReply is the error of a batched script whose batch failed before
// its replies were read: a go-redis hook panicked while sending it.
var errNoReply = errors.New("redislock: no reply: the batch failed (the script may have run)")

// A batcher sends scripts to one Redis node, batching those of concurrent
// requests. A script sent while fewer than maxBatchesInFlight batches are
// on their way goes out at once, alone, as without a batcher. The others
// queue; when a batch comes back, its sender hands the queue to one of the
// queued callers, which sends it as one pipeline (one write, one read) and
// hands the replies out. So the batcher has no goroutine of its own, and
// never holds a script back to wait for more.
//
// Invariant: the queue is empty unless maxBatchesInFlight batches are on
// their way.
type batcher struct {
	scripter    redis.Scripter         // sends a script alone
	pipeline    func() redis.Pipeliner // starts a batch
	poolTimeout time.Duration          // the longest a script waits in the queue

	mu       sync.Mutex
	inFlight int     // batches on their way
	queue    []*call // the scripts of the next batches, oldest first
}

// newBatcher returns a batcher sending through c, a *redis.Client or a
// *redis.ClusterClient, to the node whose client is node.
func newBatcher(c interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}, node *redis.Client) *batcher {
	return &batcher{scripter: c, pipeline: c.Pipeline, poolTimeout: node.Options().PoolTimeout}
}

// A call is a script waiting in a batcher's queue.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	size   int // the bytes of args that are strings or []byte

	cmd   *redis.Cmd    // the reply, once done is closed
	batch []*call       // the batch this call is to send, set under batcher.mu
	done  chan struct{} // closed once batch or cmd is set
}

// run runs script: alone if fewer than maxBatchesInFlight batches are on
// their way, else in a later batch.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	b.mu.Lock()
	if b.inFlight < maxBatchesInFlight {
		b.inFlight++
		b.mu.Unlock()
		defer b.handOff()
		return script.Run(ctx, b.scripter, keys, args...)
	}
	c := &call{ctx: ctx, script: script, keys: keys, args: args, size: argBytes(args), done: make(chan struct{})}
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	timeout := time.NewTimer(b.poolTimeout)
	defer timeout.Stop()
	if cmd := b.wait(c, timeout.C); cmd != nil {
		return cmd
	}
	defer b.handOff()
	b.send(c.batch)
	return c.cmd
}

// wait waits for queued call c's reply and returns it, or returns nil when
// c is to send a batch.
//
// A call waits in the queue until timeout (the client's PoolTimeout, as it
// would wait for a pooled connection without batching) and no longer than
// its context: then it is dropped and never runs. Once in a batch on its
// way, a call other than the sender waits for the reply as long as its
// context lets it: if it gives up, the script may run, as a script sent
// alone whose caller gave up may. A reply there when the context ends is
// the call's.
func (b *batcher) wait(c *call, timeout <-chan time.Time) *redis.Cmd {
	var err error
	select {
	case <-c.done:
	case <-c.ctx.Done():
		err = c.ctx.Err()
	case <-timeout:
		err = fmt.Errorf("%w: no batch took the script within PoolTimeout", redis.ErrPoolTimeout)
	}
	if err != nil {
		b.mu.Lock()
		if i := slices.Index(b.queue, c); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1) // never sent
			b.mu.Unlock()
			return errCmd(c.ctx, err)
		}
		sends := c.batch != nil
		b.mu.Unlock()
		if sends {
			return nil // the others in the batch want it sent
		}
		select {
		case <-c.done:
		default:
			select {
			case <-c.done:
			case <-c.ctx.Done():
				return errCmd(c.ctx, c.ctx.Err())
			}
		}
	}
	if c.batch != nil {
		return nil
	}
	return c.cmd
}

// handOff, called as a batch comes back, hands the next batch from the
// queue to the one of its calls that sends it, or ends that batch's turn.
// A queued call whose context has ended is dropped, never sent.
//
// The sender is the call of the batch with the earliest deadline (with
// none, the first), and the batch goes out with that deadline: no script is
// sent after its caller gave up (go-redis retries a batch while Redis is
// unreachable), at the cost of the other calls' failing with the batch.
func (b *batcher) handOff() {
	b.mu.Lock()
	var (
		batch []*call
		size  int
		taken int // calls of the queue taken into batch or dropped
	)
	for _, c := range b.queue {
		if err := c.ctx.Err(); err != nil {
			c.cmd = errCmd(c.ctx, err)
			close(c.done)
		} else if len(batch) == maxBatchLen || len(batch) > 0 && size+c.size > maxBatchBytes {
			break
		} else {
			batch = append(batch, c)
			size += c.size
		}
		taken++
	}
	b.queue = slices.Delete(b.queue, 0, taken)
	if len(batch) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	sender := 0
	for i, c := range batch {
		d, ok := c.ctx.Deadline()
		if earliest := deadline(batch[sender].ctx); ok && (earliest.IsZero() || d.Before(earliest)) {
			sender = i
		}
	}
	batch[0], batch[sender] = batch[sender], batch[0]
	batch[0].batch = batch
	b.mu.Unlock()
	close(batch[0].done)
}

// send sends batch, whose first call is the caller's own, as one pipeline,
// and hands each other call its reply.
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
	// The sender's values (which hooks, such as tracing, see) and deadline,
	// without its cancellation: the other calls still want their replies.
	ctx := context.WithoutCancel(batch[0].ctx)
	if d, ok := batch[0].ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
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

// deadline returns ctx's deadline, or the zero time.
func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// argBytes returns the bytes of the string and []byte values of args.
func argBytes(args []any) int {
	var n int
	for _, a := range args {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		}
	}
	return n
}

// errCmd returns a Cmd that failed with err.
func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
