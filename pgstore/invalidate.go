package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// SetInvalidate implements core.Invalidator: invalidate gets the key of
// every record purged from the store's table, by any Store in any process,
// through PostgreSQL's LISTEN/NOTIFY (Purge notifies in its transaction).
// The first call starts a listener on a connection of its own (the pool's
// configuration, outside the pool), which reconnects with backoff after a
// failure; a purge notified while it reconnects is missed, and that copy
// replays until it expires. Close stops it.
func (s *Store) SetInvalidate(invalidate func(key string)) {
	i := &s.inv
	i.mu.Lock()
	defer i.mu.Unlock()
	i.funcs = append(i.funcs, invalidate)
	if i.done != nil || i.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	i.cancel, i.done = cancel, make(chan struct{})
	go s.listen(ctx, i.done)
}

// invalidation is a Store's listener of purges.
type invalidation struct {
	mu     sync.Mutex
	funcs  []func(key string)
	cancel context.CancelFunc
	done   chan struct{} // closed when the listener has stopped; nil if none started
	closed bool
}

// stop stops the listener, if one runs, and waits for it; no listener
// starts after it.
func (i *invalidation) stop() {
	i.mu.Lock()
	i.closed = true
	cancel, done := i.cancel, i.done
	i.mu.Unlock()
	if done != nil {
		cancel()
		<-done
	}
}

func (i *invalidation) notify(key string) {
	i.mu.Lock()
	funcs := i.funcs
	i.mu.Unlock()
	for _, f := range funcs {
		f(key)
	}
}

// purgeChannel is the NOTIFY channel of the purges of the store's table:
// a hash of its qualified name, which may be longer than a channel name.
func (s *Store) purgeChannel() string {
	sum := sha256.Sum256([]byte(s.opts.ident(s.opts.Table)))
	return "idem_purged_" + hex.EncodeToString(sum[:8])
}

// Backoff of the listener's reconnections.
const (
	firstListenRetry = 100 * time.Millisecond
	maxListenRetry   = 5 * time.Second
)

// listen listens for purges until ctx is done, reconnecting after a failure.
func (s *Store) listen(ctx context.Context, done chan struct{}) {
	defer close(done)
	wait := firstListenRetry
	for {
		listening, err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listening {
			wait = firstListenRetry // it had worked: a new failure
		}
		s.opts.Logger.Warn("pgstore: purge listener (replay caches may keep purged records until they expire)",
			"table", s.opts.ident(s.opts.Table), "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, maxListenRetry)
	}
}

// listenOnce connects, listens, and hands each notification to the
// invalidate functions until the connection fails or ctx is done. It
// reports whether it got as far as listening.
func (s *Store) listenOnce(ctx context.Context) (listening bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx) //nolint:errcheck // leaving
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.purgeChannel()}.Sanitize()); err != nil {
		return false, err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		s.inv.notify(n.Payload)
	}
}
