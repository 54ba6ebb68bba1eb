package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/pgstore"
)

// Payment is a recorded payment, as GET /payments lists it.
type Payment struct {
	Key      string `json:"key"` // the Idempotency-Key it was created under
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Account  string `json:"account"`
	ChargeID string `json:"charge_id"`
}

// payments records payments once per (user, key), where the other examples
// keep their orders: in memory, in Redis, or in PostgreSQL, so that every
// instance lists the same ones. Recording a key's payment again returns
// the first.
type payments struct {
	rdb  redis.UniversalClient // nil: in memory, or PostgreSQL
	pool *pgxpool.Pool         // nil: in memory, or Redis

	mu  sync.Mutex
	mem []Payment
	ids map[string]int // user and key → index in mem
}

const (
	paymentsTable = "idem_example_payments"
	redisPayments = "idem-example:payments"
	redisSeq      = "idem-example:payment-seq"
	// redisTimeout bounds the Redis calls of a record or a list, as the
	// order examples bound theirs: a Redis that is down is an error then.
	redisTimeout = time.Second
)

// newPayments returns the payments of pool if not nil, else of rdb if not
// nil, else in memory; on PostgreSQL, it creates the table.
func newPayments(ctx context.Context, rdb redis.UniversalClient, pool *pgxpool.Pool) (*payments, error) {
	if pool == nil {
		return &payments{rdb: rdb, ids: map[string]int{}}, nil
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", paymentsTable); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+paymentsTable+` (
	id         bigserial PRIMARY KEY,
	user_id    text NOT NULL,
	key        text NOT NULL,
	amount     bigint NOT NULL,
	account    text NOT NULL,
	charge_id  text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	UNIQUE (user_id, key))`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("payments table: %w", err)
	}
	return &payments{pool: pool}, nil
}

// record records p for user, or returns the payment recorded before under
// its key. On PostgreSQL it writes through the transaction of ctx if there
// is one (a step's, in the transactional mode).
func (s *payments) record(ctx context.Context, user string, p Payment) (Payment, error) {
	switch {
	case s.pool != nil:
		db := pgstore.TxOr(ctx, s.pool)
		var id int64
		err := db.QueryRow(ctx, `INSERT INTO `+paymentsTable+` (user_id, key, amount, account, charge_id) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (user_id, key) DO UPDATE SET key = EXCLUDED.key
RETURNING id, amount, account, charge_id`, user, p.Key, p.Amount, p.Account, p.ChargeID).Scan(&id, &p.Amount, &p.Account, &p.ChargeID)
		p.ID = "pay_" + strconv.FormatInt(id, 10)
		return p, err
	case s.rdb != nil:
		ctx, cancel := context.WithTimeout(ctx, redisTimeout)
		defer cancel()
		n, err := s.rdb.Incr(ctx, redisSeq).Result()
		if err != nil {
			return p, err
		}
		p.ID = "pay_" + strconv.FormatInt(n, 10)
		b, _ := json.Marshal(p)
		field := user + "\x00" + p.Key
		if ok, err := s.rdb.HSetNX(ctx, redisPayments, field, b).Result(); err != nil || ok {
			return p, err
		}
		first, err := s.rdb.HGet(ctx, redisPayments, field).Bytes()
		if err != nil {
			return p, err
		}
		return p, json.Unmarshal(first, &p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.ids[user+"\x00"+p.Key]; ok {
		return s.mem[i], nil
	}
	p.ID = "pay_" + strconv.Itoa(len(s.mem)+1)
	s.ids[user+"\x00"+p.Key] = len(s.mem)
	s.mem = append(s.mem, p)
	return p, nil
}

// list returns every payment recorded, oldest first.
func (s *payments) list(ctx context.Context) ([]Payment, error) {
	switch {
	case s.pool != nil:
		rows, err := s.pool.Query(ctx, "SELECT key, 'pay_' || id, amount, account, charge_id FROM "+paymentsTable+" ORDER BY id")
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payment, error) {
			var p Payment
			return p, r.Scan(&p.Key, &p.ID, &p.Amount, &p.Account, &p.ChargeID)
		})
	case s.rdb != nil:
		ctx, cancel := context.WithTimeout(ctx, redisTimeout)
		defer cancel()
		vals, err := s.rdb.HVals(ctx, redisPayments).Result()
		if err != nil {
			return nil, err
		}
		list := make([]Payment, len(vals))
		for i, v := range vals {
			if err := json.Unmarshal([]byte(v), &list[i]); err != nil {
				return nil, err
			}
		}
		seq := func(p Payment) int { n, _ := strconv.Atoi(strings.TrimPrefix(p.ID, "pay_")); return n }
		slices.SortFunc(list, func(a, b Payment) int { return seq(a) - seq(b) })
		return list, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mem), nil
}
