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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(s.opts.JanitorInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
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
// session advisory lock); otherwise it returns 0 at once. The janitor
// calls it; call it yourself with Options.JanitorInterval < 0.
func (s *Store) Sweep(ctx context.Context) (deleted int64, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return 0, fmt.Errorf("pgstore: sweep: %w", err)
	}
	// Closing the connection releases the advisory lock.
	defer conn.Close(context.WithoutCancel(ctx))
	var locked bool
	err = conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", s.sql.lockID).Scan(&locked)
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
			tag, err := conn.Exec(ctx, q.sql, q.args...)
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
