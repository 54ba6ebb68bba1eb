// Command consumer applies the events of a Redis Stream to PostgreSQL
// exactly once, through pgstore's transactional inbox: each event's credit
// to an account, its ledger entry and its mark in processed_events commit
// in one transaction, and the stream entry is acknowledged (XACK) after
// the commit. A consumer killed at any instant leaves its entries pending;
// the live consumers of the group claim them after CLAIM_AFTER (XAUTOCLAIM)
// and apply them, or skip those applied before the kill. An entry a live
// consumer holds longer than CLAIM_AFTER (a long batch, a slow event) is
// claimed too, and the inbox skips it where the first application
// committed: set CLAIM_AFTER above the longest event. Each process joins
// the group as CONSUMER; the default, new at each start, leaves the dead
// ones listed in XINFO CONSUMERS (XGROUP DELCONSUMER removes them): a
// fixed name per instance avoids that.
//
//	go run .        # until SIGTERM or SIGINT
//
// Environment:
//
//	REDIS_URL     redis://127.0.0.1:6379/0
//	DATABASE_URL  postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	STREAM        idem-example:events
//	GROUP         ledger
//	CONSUMER      <host>-<pid>
//	CLAIM_AFTER   2s
//	DEAD_STREAM   <STREAM>:dead
//
// An event is a stream entry with the fields id, account, amount (an
// integer) and delay_ms (a pause before applying it); one event may be
// published several times under one id. The consumer creates its tables on
// start: accounts(account text primary key, balance bigint not null),
// ledger_entries (one row per application) and the inbox's. An event that
// PostgreSQL refuses for its data (a data or integrity error, such as a
// balance out of bigint's range, or a program limit, such as an account too
// long for its index) would fail again each time it is claimed: it goes
// to DEAD_STREAM with the error, for an operator to look at and publish
// again, and is acknowledged, rather than claimed again for ever. Other
// errors (PostgreSQL down) leave it pending, claimed again after
// CLAIM_AFTER. A malformed entry (no id or account, an amount that is not
// an integer, a bad delay_ms) never becomes valid either: it goes to
// DEAD_STREAM too. An event published again under an id already applied is
// skipped, whatever its fields (the inbox keeps ids, not payloads).
//
// With -generic it uses core.Engine.Once on the Redis store instead of the
// inbox: the mark lives in Redis, apart from the effect, and a consumer
// killed between the two applies the event twice (the integration test
// counts how often).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/redislock"
)

type config struct {
	redisURL, dbURL, stream, dead, group, consumer string
	claimAfter                                     time.Duration
	generic                                        bool
	lockTTL                                        time.Duration
	prefix                                         string
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg := config{
		redisURL: env("REDIS_URL", "redis://127.0.0.1:6379/0"),
		dbURL:    env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		stream:   env("STREAM", "idem-example:events"),
		group:    env("GROUP", "ledger"),
		consumer: os.Getenv("CONSUMER"),
	}
	cfg.dead = env("DEAD_STREAM", cfg.stream+":dead")
	if cfg.consumer == "" {
		host, _ := os.Hostname()
		cfg.consumer = host + "-" + strconv.Itoa(os.Getpid())
	}
	claim, err := time.ParseDuration(env("CLAIM_AFTER", "2s"))
	if err != nil || claim <= 0 {
		log.Error("CLAIM_AFTER: a positive duration, such as 2s", "value", os.Getenv("CLAIM_AFTER"))
		os.Exit(2)
	}
	cfg.claimAfter = claim
	flag.BoolVar(&cfg.generic, "generic", false, "mark events in Redis with core.Engine.Once instead of the transactional inbox")
	flag.DurationVar(&cfg.lockTTL, "lock-ttl", 10*time.Second, "with -generic: the Engine's LockTTL")
	flag.StringVar(&cfg.prefix, "prefix", redislock.DefaultPrefix, "with -generic: the Redis store's key prefix")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("consumer stopped", "err", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// An event is one stream entry.
type event struct {
	ID      string
	Account string
	Amount  int64
	Delay   time.Duration
}

func parse(values map[string]any) (event, error) {
	str := func(k string) string { s, _ := values[k].(string); return s }
	ev := event{ID: str("id"), Account: str("account")}
	amount, err := strconv.ParseInt(str("amount"), 10, 64)
	if err != nil || ev.ID == "" || ev.Account == "" {
		return ev, fmt.Errorf("an event needs id, account and an integer amount: %v", values)
	}
	ev.Amount = amount
	if ms := str("delay_ms"); ms != "" {
		n, err := strconv.Atoi(ms)
		if err != nil || n < 0 {
			return ev, fmt.Errorf("delay_ms %q", ms)
		}
		ev.Delay = time.Duration(n) * time.Millisecond
	}
	return ev, nil
}

const (
	creditSQL = `INSERT INTO accounts (account, balance) VALUES ($1, $2)
ON CONFLICT (account) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance`
	entrySQL = `INSERT INTO ledger_entries (event_id, account, amount) VALUES ($1, $2, $3)`
)

// credit applies ev through tx: the balance and a ledger entry.
func credit(ctx context.Context, tx pgx.Tx, ev event) error {
	if _, err := tx.Exec(ctx, creditSQL, ev.Account, ev.Amount); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, entrySQL, ev.ID, ev.Account, ev.Amount)
	return err
}

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	rdb, err := redislock.NewClient(cfg.redisURL)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	defer rdb.Close()
	pool, err := pgxpool.New(ctx, cfg.dbURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if err := setup(ctx, pool); err != nil {
		return err
	}
	inbox, err := pgstore.NewInbox(pool, nil)
	if err != nil {
		return err
	}
	apply := func(ctx context.Context, ev event) (bool, error) {
		return inbox.Process(ctx, ev.ID, func(ctx context.Context, tx pgx.Tx) error { return credit(ctx, tx, ev) })
	}
	if cfg.generic {
		store, err := redislock.New(rdb, &redislock.Options{Prefix: cfg.prefix})
		if err != nil {
			return err
		}
		eng, err := core.New(core.Config{
			Store:   store,
			LockTTL: cfg.lockTTL,
		})
		if err != nil {
			return err
		}
		apply = func(ctx context.Context, ev event) (bool, error) {
			return eng.Once(ctx, cfg.stream, ev.ID, func(ctx context.Context) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return credit(ctx, tx, ev) })
			})
		}
	}
	err = rdb.XGroupCreateMkStream(ctx, cfg.stream, cfg.group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("XGROUP CREATE: %w", err)
	}
	log.Info("consuming", "stream", cfg.stream, "group", cfg.group, "consumer", cfg.consumer, "generic", cfg.generic)

	handle := func(msgs []redis.XMessage) {
		for _, m := range msgs {
			ev, err := parse(m.Values)
			if err != nil {
				// A malformed entry never becomes valid: to the dead-letter
				// stream, rather than claimed again for ever, or lost.
				deadLetter(ctx, rdb, cfg, log, m, err)
				continue
			}
			if ev.Delay > 0 {
				select {
				case <-time.After(ev.Delay):
				case <-ctx.Done():
					return
				}
			}
			applied, err := apply(ctx, ev)
			if refused(err) {
				deadLetter(ctx, rdb, cfg, log, m, err)
				continue
			}
			if err != nil {
				// Left pending: claimed again after CLAIM_AFTER.
				log.Warn("event not applied", "id", ev.ID, "entry", m.ID, "err", err)
				continue
			}
			if err := rdb.XAck(ctx, cfg.stream, cfg.group, m.ID).Err(); err != nil {
				log.Warn("XACK", "entry", m.ID, "err", err)
			}
			log.Debug("event", "id", ev.ID, "applied", applied)
		}
	}
	for ctx.Err() == nil {
		// Entries left pending by a dead consumer, then new ones.
		for start := "0-0"; ; {
			msgs, next, err := rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: cfg.stream, Group: cfg.group,
				Consumer: cfg.consumer, MinIdle: cfg.claimAfter, Start: start, Count: 100}).Result()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("XAUTOCLAIM: %w", err)
			}
			handle(msgs)
			if start = next; next == "0-0" || len(msgs) == 0 {
				break
			}
		}
		streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: cfg.group, Consumer: cfg.consumer,
			Streams: []string{cfg.stream, ">"}, Count: 100, Block: cfg.claimAfter / 2}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("XREADGROUP: %w", err)
		}
		for _, s := range streams {
			handle(s.Messages)
		}
	}
	return ctx.Err()
}

// refused reports whether PostgreSQL refused an event for its data (SQLSTATE
// class 22, data exception, 23, integrity constraint violation, or 54,
// program limit exceeded: an account or id too long for its index): trying
// again fails again until the data it meets changes.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	class := pgErr.Code[:min(2, len(pgErr.Code))]
	return class == "22" || class == "23" || class == "54"
}

// deadLetter adds the entry m, malformed or refused by PostgreSQL, to the
// dead-letter stream, with its entry id and the error, then acknowledges
// it. A consumer killed in between leaves it pending, and the next adds it
// again: a dead letter may be there twice (the two streams may live on
// different nodes of a cluster, where one MULTI cannot hold both).
func deadLetter(ctx context.Context, rdb redis.UniversalClient, cfg config, log *slog.Logger, m redis.XMessage, reason error) {
	values := maps.Clone(m.Values)
	values["entry"], values["error"] = m.ID, reason.Error()
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: cfg.dead, Values: values}).Err(); err != nil {
		log.Warn("event not moved to the dead-letter stream: left pending", "entry", m.ID, "err", err)
		return
	}
	log.Error("event moved to the dead-letter stream", "entry", m.ID, "dead_stream", cfg.dead, "err", reason)
	if err := rdb.XAck(ctx, cfg.stream, cfg.group, m.ID).Err(); err != nil {
		log.Warn("XACK", "entry", m.ID, "err", err)
	}
}

// setup creates the tables, under an advisory lock: consumers may start
// together.
func setup(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('idem-example consumer', 0))"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS accounts (account text PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE IF NOT EXISTS ledger_entries (
	event_id   text NOT NULL,
	account    text NOT NULL,
	amount     bigint NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`)
		return err
	})
	if err != nil {
		return fmt.Errorf("tables: %w", err)
	}
	return pgstore.MigrateInbox(ctx, pool, nil)
}
