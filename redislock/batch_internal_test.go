package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
)

func TestBatchingMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	testBatching(t, func(t *testing.T) (*redis.Client, string) {
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		return c, "batchtest"
	})
}

// testBatching checks the Store's batcher on the Redis of newClient, whose
// keys under the prefix it returns are the test's own. Each case first holds
// the batcher's lanes with scripts that a hook keeps from reaching Redis, so
// that the calls it makes next queue for one batch.
func testBatching(t *testing.T, newClient func(*testing.T) (*redis.Client, string)) {
	ctx := context.Background()
	setup := func(t *testing.T) (*Store, *gate, *redis.Client) {
		c, prefix := newClient(t)
		g := &gate{held: map[string]bool{}, release: make(chan struct{}), entered: make(chan struct{}, maxBatchesInFlight)}
		for _, script := range []*redis.Script{acquireScript, completeScript, releaseScript, refreshScript} {
			if err := script.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
		}
		c.AddHook(g)
		s, err := New(c, &Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if s.batch == nil {
			t.Fatal("no batcher on a *redis.Client")
		}
		return s, g, c
	}

	t.Run("replies", func(t *testing.T) {
		s, g, c := setup(t)
		// Keys with a record (replays), a lock (in flight), or neither.
		const n = 30
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("key%d", i)
			resp, lock, _ := s.Keys(keys[i])
			switch i % 3 {
			case 1:
				c.Set(ctx, resp, "record of "+keys[i], time.Minute)
			case 2:
				c.Set(ctx, lock, "another request", time.Minute)
			}
		}
		released := g.holdLanes(t, s)
		type result struct {
			record []byte
			token  string
			err    error
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		for i, key := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, token, err := s.Acquire(ctx, key, time.Minute)
				results[i] = result{rec, token, err}
			}()
		}
		waitQueued(t, s.batch, n)
		released()
		wg.Wait()

		if got := g.pipelineSizes(); len(got) != 1 || got[0] != n {
			t.Fatalf("pipelines of %v scripts, want one of %d", got, n)
		}
		tokens := map[string]bool{}
		for i, r := range results {
			resp, lock, _ := s.Keys(keys[i])
			switch i % 3 {
			case 0:
				if r.err != nil || r.token == "" || tokens[r.token] {
					t.Errorf("%s (new): token %q, %v; want a token of its own", keys[i], r.token, r.err)
				}
				tokens[r.token] = true
				if got := c.Get(ctx, lock).Val(); got != r.token {
					t.Errorf("%s: the lock holds %q, want the caller's token %q", keys[i], got, r.token)
				}
				if c.Exists(ctx, resp).Val() != 0 {
					t.Errorf("%s: a record appeared", keys[i])
				}
			case 1:
				if r.err != nil || string(r.record) != "record of "+keys[i] {
					t.Errorf("%s (stored): %q, %v; want its own record", keys[i], r.record, r.err)
				}
			case 2:
				if !errors.Is(r.err, core.ErrInFlight) {
					t.Errorf("%s (locked): %v, want ErrInFlight", keys[i], r.err)
				}
			}
		}

		// Complete and Release go through the batcher too.
		released = g.holdLanes(t, s)
		errs := make([]error, n)
		for i, key := range keys {
			if i%3 != 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					errs[i] = s.Complete(ctx, key, results[i].token, []byte("stored "+key), time.Minute)
				} else {
					errs[i] = s.Release(ctx, key, results[i].token)
				}
			}()
		}
		waitQueued(t, s.batch, n/3)
		released()
		wg.Wait()
		if got := g.pipelineSizes(); len(got) != 1 || got[0] != n/3 {
			t.Fatalf("pipelines of %v scripts, want one of %d", got, n/3)
		}
		for i, key := range keys {
			if i%3 != 0 {
				continue
			}
			resp, lock, _ := s.Keys(key)
			want := ""
			if i%2 == 0 {
				want = "stored " + key
			}
			if errs[i] != nil || c.Get(ctx, resp).Val() != want || c.Exists(ctx, lock).Val() != 0 {
				t.Errorf("%s: %v, record %q, lock left %d; want record %q, no lock",
					key, errs[i], c.Get(ctx, resp).Val(), c.Exists(ctx, lock).Val(), want)
			}
		}
		checkIdle(t, s.batch)
	})

	t.Run("batch-length", func(t *testing.T) {
		s, g, _ := setup(t)
		released := g.holdLanes(t, s)
		const n = maxBatchLen + 50
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, token, err := s.Acquire(ctx, fmt.Sprintf("len%d", i), time.Minute); err != nil || token == "" {
					t.Errorf("Acquire: %q, %v", token, err)
				}
			}()
		}
		waitQueued(t, s.batch, n)
		released()
		wg.Wait()
		got := g.pipelineSizes()
		if len(got) != 2 || got[0]+got[1] != n || max(got[0], got[1]) != maxBatchLen {
			t.Errorf("pipelines of %v scripts, want %d and %d", got, maxBatchLen, n-maxBatchLen)
		}
		checkIdle(t, s.batch)
	})

	t.Run("canceled-while-queued", func(t *testing.T) {
		s, g, c := setup(t)
		released := g.holdLanes(t, s)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() {
			_, _, err := s.Acquire(cctx, "canceled", time.Minute)
			done <- err
		}()
		waitQueued(t, s.batch, 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire: %v, want context.Canceled", err)
		}
		waitQueued(t, s.batch, 0)
		released()
		if got := g.pipelineSizes(); len(got) != 0 {
			t.Errorf("pipelines of %v scripts, want none", got)
		}
		if _, lock, _ := s.Keys("canceled"); c.Exists(ctx, lock).Val() != 0 {
			t.Error("the canceled call's script ran: it took the lock")
		}
		checkIdle(t, s.batch)
	})

	t.Run("deadline-while-sent", func(t *testing.T) {
		// A batch holding "hold-batch" is kept from Redis past the
		// deadline of the other call in it, whether that call came first
		// or not: it returns at its deadline, and its script must not run
		// once the batch goes on (a late lock, refusing retries for its
		// TTL); the batch carries that deadline, so neither script runs.
		for _, deadlineFirst := range []bool{true, false} {
			s, g, c := setup(t)
			released := g.holdLanes(t, s)
			first, second := make(chan error, 1), make(chan error, 1)
			acquire := func(key string, timeout time.Duration, done chan<- error) {
				ctx := ctx
				if timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				_, _, err := s.Acquire(ctx, key, time.Minute)
				done <- err
			}
			held, timed := fmt.Sprintf("hold-batch-%v", deadlineFirst), fmt.Sprintf("deadline-%v", deadlineFirst)
			if deadlineFirst {
				go acquire(timed, 500*time.Millisecond, second)
				waitQueued(t, s.batch, 1)
				go acquire(held, 0, first)
			} else {
				go acquire(held, 0, first)
				waitQueued(t, s.batch, 1)
				go acquire(timed, 500*time.Millisecond, second)
			}
			waitQueued(t, s.batch, 2)
			released()
			<-g.entered // the batch is held
			select {
			case err := <-second:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("deadline first %v: call with a deadline: %v, want DeadlineExceeded", deadlineFirst, err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("deadline first %v: call with a deadline still waiting 5 s past it", deadlineFirst)
			}
			close(g.release2)
			if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("deadline first %v: call without a deadline: %v, want the batch's DeadlineExceeded", deadlineFirst, err)
			}
			for _, key := range []string{timed, held} {
				if _, lock, _ := s.Keys(key); c.Exists(ctx, lock).Val() != 0 {
					t.Errorf("deadline first %v: %s's script ran after the batch's deadline: it took the lock", deadlineFirst, key)
				}
			}
			checkIdle(t, s.batch)
		}
	})

	t.Run("queue-timeout", func(t *testing.T) {
		// A script waits in the queue for PoolTimeout at most, then is
		// dropped, as one waiting for a pooled connection would fail.
		s, g, c := setup(t)
		s.batch.poolTimeout = 50 * time.Millisecond
		released := g.holdLanes(t, s)
		_, _, err := s.Acquire(ctx, "timeout", time.Minute)
		if !errors.Is(err, redis.ErrPoolTimeout) {
			t.Errorf("Acquire queued behind held batches: %v, want ErrPoolTimeout", err)
		}
		waitQueued(t, s.batch, 0)
		released()
		if _, lock, _ := s.Keys("timeout"); c.Exists(ctx, lock).Val() != 0 {
			t.Error("the dropped script ran: it took the lock")
		}
		checkIdle(t, s.batch)
	})

	t.Run("batch-bytes", func(t *testing.T) {
		// Records of 600 KB: two do not fit in one batch (1 MiB), one and
		// small ones do.
		s, g, _ := setup(t)
		big := make([]byte, 600<<10)
		records := [][]byte{big, []byte("small"), []byte("small"), big, []byte("small")}
		tokens := make([]string, len(records))
		for i := range records {
			_, tokens[i], _ = s.Acquire(ctx, fmt.Sprintf("bytes%d", i), time.Minute)
		}
		released := g.holdLanes(t, s)
		errs := make(chan error, len(records))
		for i, rec := range records {
			go func() { errs <- s.Complete(ctx, fmt.Sprintf("bytes%d", i), tokens[i], rec, time.Minute) }()
			waitQueued(t, s.batch, i+1)
		}
		released()
		for range records {
			if err := <-errs; err != nil {
				t.Errorf("Complete: %v", err)
			}
		}
		if got := g.pipelineSizes(); len(got) != 2 || got[0]+got[1] != 5 || min(got[0], got[1]) != 2 {
			t.Errorf("pipelines of %v scripts, want 3 and 2", got)
		}
		checkIdle(t, s.batch)
	})

	t.Run("noscript", func(t *testing.T) {
		s, g, c := setup(t)
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		released := g.holdLanes(t, s) // with refresh.lua: acquire.lua stays unknown
		const n = 10
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, token, err := s.Acquire(ctx, fmt.Sprintf("noscript%d", i), time.Minute); err != nil || token == "" {
					t.Errorf("Acquire: %q, %v", token, err)
				}
			}()
		}
		waitQueued(t, s.batch, n)
		released()
		wg.Wait()
		if got := g.pipelines(); len(got) != 2 || got[0] != strings.Repeat("evalsha ", n) || got[1] != strings.Repeat("eval ", n) {
			t.Errorf("pipelines %q, want %d EVALSHA (NOSCRIPT), then as many EVAL", got, n)
		}
		checkIdle(t, s.batch)
	})

	t.Run("hook-panics", func(t *testing.T) {
		s, g, _ := setup(t)
		released := g.holdLanes(t, s)
		panicked := make(chan any)
		go func() {
			defer func() { panicked <- recover() }()
			s.Acquire(ctx, "panic", time.Minute)
		}()
		waitQueued(t, s.batch, 1) // first in the queue: it sends the batch
		errs := make(chan error, 5)
		for i := range 5 {
			go func() {
				_, _, err := s.Acquire(ctx, fmt.Sprintf("other%d", i), time.Minute)
				errs <- err
			}()
		}
		waitQueued(t, s.batch, 6)
		released()
		if p := <-panicked; p != "hook" {
			t.Errorf("the sender's panic: %v, want the hook's", p)
		}
		for range 5 {
			if err := <-errs; !errors.Is(err, errNoReply) {
				t.Errorf("another call of the batch: %v, want errNoReply", err)
			}
		}
		checkIdle(t, s.batch)
		if _, token, err := s.Acquire(ctx, "after", time.Minute); err != nil || token == "" {
			t.Errorf("Acquire after the panic: %q, %v", token, err)
		}
	})
}

// waitQueued waits until b's queue holds n calls.
func waitQueued(t *testing.T, b *batcher, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		b.mu.Lock()
		l := len(b.queue)
		b.mu.Unlock()
		if l == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", l, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkIdle fails t if b has a batch in flight or a call queued.
func checkIdle(t *testing.T, b *batcher) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight != 0 || len(b.queue) != 0 {
		t.Errorf("batcher not idle: %d in flight, %d queued", b.inFlight, len(b.queue))
	}
}

// A gate is a go-redis hook. It holds the first run of a script on a key
// starting with "hold-" until release is closed, and a pipeline holding
// such a key until release2 is or its context ends; it panics on a pipeline holding the key
// "panic", and records the commands of every other pipeline.
type gate struct {
	entered           chan struct{} // receives as a script or pipeline is held
	release, release2 chan struct{}

	mu    sync.Mutex
	held  map[string]bool
	pipes []string // command names of each pipeline, space-terminated
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if key := scriptKey(cmd); strings.Contains(key, "{hold-") {
			g.mu.Lock()
			first := !g.held[key]
			g.held[key] = true
			g.mu.Unlock()
			if first {
				g.entered <- struct{}{}
				<-g.release
			}
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names string
		for _, cmd := range cmds {
			switch key := scriptKey(cmd); {
			case strings.Contains(key, "{panic}"):
				panic("hook")
			case strings.Contains(key, "{hold-"):
				g.entered <- struct{}{}
				select { // as the network holds it: until the batch's deadline
				case <-g.release2:
				case <-ctx.Done():
				}
			}
			names += cmd.Name() + " "
		}
		if strings.HasPrefix(names, "eval") { // not a new connection's CLIENT SETINFO
			g.mu.Lock()
			g.pipes = append(g.pipes, names)
			g.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// scriptKey returns the first key of an EVAL or EVALSHA, or "".
func scriptKey(cmd redis.Cmder) string {
	if args := cmd.Args(); len(args) > 3 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
		return fmt.Sprint(args[3])
	}
	return ""
}

// holdLanes starts as many refresh scripts as s's batcher sends at once,
// holds them before they reach Redis, and resets the pipelines recorded.
// The function it returns lets them go on and waits for them.
func (g *gate) holdLanes(t *testing.T, s *Store) (released func()) {
	t.Helper()
	g.release, g.release2 = make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for i := range maxBatchesInFlight {
		key := fmt.Sprintf("hold-%s-%d-%d", t.Name(), i, time.Now().UnixNano())
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Refresh(context.Background(), key, "token", time.Minute)
		}()
		<-g.entered
	}
	g.mu.Lock()
	g.pipes = nil
	g.mu.Unlock()
	return func() {
		close(g.release)
		wg.Wait()
	}
}

// pipelines returns the command names of the pipelines sent since
// holdLanes.
func (g *gate) pipelines() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pipes
}

// pipelineSizes returns the lengths of the pipelines sent since holdLanes.
func (g *gate) pipelineSizes() []int {
	var n []int
	for _, p := range g.pipelines() {
		n = append(n, strings.Count(p, " "))
	}
	return n
}

// TestBatcherWaitPrefersReply: a call whose reply is there when its
// context ends gets the reply (a select between the two would drop it half
// of the time).
func TestBatcherWaitPrefersReply(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	reply := redis.NewCmd(ctx)
	c := &call{ctx: ctx, cmd: reply, done: make(chan struct{})}
	close(c.done)
	var b batcher
	for range 100 {
		if got := b.wait(c, nil); got != reply {
			t.Fatalf("wait returned %v, want the reply", got)
		}
	}
}

// TestBatcherHandOffDropsEndedCalls: a queued call whose context ended
// before its batch was made is dropped, never sent, and a batch of none
// ends the turn.
func TestBatcherHandOffDropsEndedCalls(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	newCall := func(ctx context.Context) *call { return &call{ctx: ctx, done: make(chan struct{})} }
	x, y, z := newCall(ended), newCall(context.Background()), newCall(ended)
	b := &batcher{inFlight: maxBatchesInFlight, queue: []*call{x, y, z}}
	b.handOff()
	<-x.done
	if !errors.Is(x.cmd.Err(), context.Canceled) || x.batch != nil {
		t.Errorf("ended call: %v, batch %v; want context.Canceled, none", x.cmd.Err(), x.batch)
	}
	<-y.done
	if len(y.batch) != 1 || y.batch[0] != y {
		t.Errorf("live call: batch %v, want to send itself alone", y.batch)
	}
	<-z.done
	if !errors.Is(z.cmd.Err(), context.Canceled) || len(b.queue) != 0 || b.inFlight != maxBatchesInFlight {
		t.Errorf("after: %v, queue %d, in flight %d; want z dropped, queue empty, %d in flight",
			z.cmd.Err(), len(b.queue), b.inFlight, maxBatchesInFlight)
	}

	w := newCall(ended)
	b.queue = []*call{w}
	b.handOff()
	<-w.done
	if len(b.queue) != 0 || b.inFlight != maxBatchesInFlight-1 {
		t.Errorf("a queue of ended calls: queue %d, in flight %d; want 0, %d", len(b.queue), b.inFlight, maxBatchesInFlight-1)
	}
}

// A batch that go-redis retries while Redis is unreachable goes out with
// its earliest deadline: the script of a call whose caller gave up during
// the outage never runs when Redis comes back (its late lock would refuse
// the key's retries for the lock's TTL).
func TestBatchNotSentAfterOutage(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: 1000,
		MinRetryBackoff: 5 * time.Millisecond, MaxRetryBackoff: 10 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	s, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.batch.mu.Lock()
	s.batch.inFlight = maxBatchesInFlight // both lanes busy: the next calls queue
	s.batch.mu.Unlock()
	gaveUp, other := make(chan error, 1), make(chan error, 1)
	acquire := func(key string, timeout time.Duration, done chan<- error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, _, err := s.Acquire(ctx, key, time.Minute)
		done <- err
	}
	go acquire("gave-up", time.Second, gaveUp)
	waitQueued(t, s.batch, 1)
	go acquire("other", time.Minute, other)
	waitQueued(t, s.batch, 2)
	m.Close()         // the outage
	s.batch.handOff() // a lane comes back: the batch goes out, into the outage
	if err := <-gaveUp; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the call with the earlier deadline: %v, want DeadlineExceeded", err)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	<-other // the batch ended: with its first deadline (or, before, with Redis back)
	if _, lock, _ := s.Keys("gave-up"); m.Exists(lock) {
		t.Fatal("the script of a call that gave up during the outage ran when Redis came back: a late lock")
	}
}
