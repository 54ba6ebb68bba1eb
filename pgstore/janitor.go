package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// janitor sweeps every JanitorInterval until Close.
func (s *Store) janitor() {
	defer close(s.done)
	t := time.NewTicker(s.opts.JanitorInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if n, err := s.sweep(context.Background(), s.stop); err != nil {
			s.opts.Logger.Warn("pgstore: janitor", "table", s.opts.ident(s.opts.Table), "deleted", n, "err", err)
		}
	}
}

// Sweep deletes the expired rows: records past their expiry, locks that
// expired over Options.StaleLockAge ago, step checkpoints past their
// expiry and quota admissions out of their window, in batches of
// Options.JanitorBatch rows, each DELETE its own transaction that skips
// the rows live requests hold. It runs on a connection of its own (not one
// of the pool's) and only if no other instance is sweeping the table (a
// session advisory lock); otherwise it returns 0 at once. Without a
// deadline in ctx, each statement takes at most Options.Timeout. The
// janitor calls it; call it yourself with Options.JanitorInterval < 0.
func (s *Store) Sweep(ctx context.Context) (deleted int64, err error) {
	return s.sweep(ctx, nil)
}

// sweep is Sweep for the janitor too: once stop is closed it ends between
// two statements, never in one (PostgreSQL could still run a statement its
// client gave up on, after Close returned). With stop, or a ctx without a
// deadline, the connection and each statement take at most Options.Timeout.
func (s *Store) sweep(ctx context.Context, stop <-chan struct{}) (deleted int64, err error) {
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	_, hasDeadline := ctx.Deadline()
	bound := func() (context.Context, context.CancelFunc) {
		if stop == nil && hasDeadline || s.opts.Timeout <= 0 {
			return ctx, func() {}
		}
		return context.WithTimeout(ctx, s.opts.Timeout)
	}
	cctx, cancel := bound()
	conn, err := pgx.ConnectConfig(cctx, s.pool.Config().ConnConfig)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("pgstore: sweep: %w", err)
	}
	// Closing the connection releases the advisory lock.
	defer conn.Close(context.WithoutCancel(ctx))
	var locked bool
	cctx, cancel = bound()
	err = conn.QueryRow(cctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", s.sql.lockID).Scan(&locked)
	cancel()
	if err != nil || !locked {
		return 0, wrapSweep(err)
	}
	batch := s.opts.JanitorBatch
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{s.sql.sweepExpired, []any{batch}},
		{s.sql.sweepStale, []any{batch, s.opts.StaleLockAge}},
		{s.sql.sweepSteps, []any{batch}},
		{s.qsql.sweep, []any{batch}},
	} {
		for {
			if stopped() {
				return deleted, nil
			}
			cctx, cancel := bound()
			tag, err := conn.Exec(cctx, q.sql, q.args...)
			cancel()
			if err != nil {
				return deleted, wrapSweep(err)
			}
			deleted += tag.RowsAffected()
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return deleted, nil
}

func wrapSweep(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("pgstore: sweep: %w", err)
}
