package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	ordersv1 "github.com/idem-go/idem/examples/grpc/proto/idem/examples/orders/v1"
	"github.com/idem-go/idem/pgstore"
)

// Redis keys of the orders, apart from the HTTP examples' ones.
const (
	redisList = "idem-example:grpc-orders"
	redisSeq  = "idem-example:grpc-order-seq"
	// redisTimeout bounds each call to Redis: without a deadline, a call
	// to a Redis that is down waits for it to come back (redislock.NewClient).
	redisTimeout = time.Second
	// postgresTimeout bounds an order's INSERT, which a client that goes
	// away does not cut off (create).
	postgresTimeout = 5 * time.Second
)

// ordersTable holds the orders in PostgreSQL, apart from the HTTP examples'.
const ordersTable = `CREATE TABLE IF NOT EXISTS idem_example_grpc_orders (
	id bigserial PRIMARY KEY, item text NOT NULL, qty integer NOT NULL)`

// store keeps the orders in memory, or in Redis or PostgreSQL so that every
// instance lists what was really created.
type store struct {
	rdb  redis.UniversalClient // nil: in memory or PostgreSQL
	pool *pgxpool.Pool         // nil: in memory or Redis
	mu   sync.Mutex
	mem  []*ordersv1.Order
}

func (s *store) create(ctx context.Context, item string, qty int32) (*ordersv1.Order, error) {
	// The order may be written from here: a client that goes away must not
	// turn a write that happened into an error, which would release the
	// key for a retry that writes it again.
	ctx = context.WithoutCancel(ctx)
	o := &ordersv1.Order{Item: item, Qty: qty}
	if s.pool != nil {
		// Through the call's transaction in the transactional mode: the
		// order commits with the stored reply.
		db := pgstore.TxOr(ctx, s.pool)
		ctx, cancel := context.WithTimeout(ctx, postgresTimeout)
		defer cancel()
		var id int64
		if err := db.QueryRow(ctx, "INSERT INTO idem_example_grpc_orders (item, qty) VALUES ($1, $2) RETURNING id", item, qty).Scan(&id); err != nil {
			return nil, err
		}
		o.Id = "ord_" + strconv.FormatInt(id, 10)
		return o, nil
	}
	if s.rdb == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		o.Id = "ord_" + strconv.Itoa(len(s.mem)+1)
		s.mem = append(s.mem, o)
		return o, nil
	}
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	n, err := s.rdb.Incr(ctx, redisSeq).Result()
	if err != nil {
		return nil, err
	}
	o.Id = "ord_" + strconv.FormatInt(n, 10)
	b, err := proto.Marshal(o)
	if err != nil {
		return nil, err
	}
	return o, s.rdb.RPush(ctx, redisList, b).Err()
}

func (s *store) list(ctx context.Context) ([]*ordersv1.Order, error) {
	if s.pool != nil {
		rows, err := s.pool.Query(ctx, "SELECT 'ord_' || id, item, qty FROM idem_example_grpc_orders ORDER BY id")
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*ordersv1.Order, error) {
			o := &ordersv1.Order{}
			return o, r.Scan(&o.Id, &o.Item, &o.Qty)
		})
	}
	if s.rdb == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]*ordersv1.Order(nil), s.mem...), nil
	}
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	raw, err := s.rdb.LRange(ctx, redisList, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	orders := make([]*ordersv1.Order, len(raw))
	for i, r := range raw {
		orders[i] = &ordersv1.Order{}
		if err := proto.Unmarshal([]byte(r), orders[i]); err != nil {
			return nil, err
		}
	}
	return orders, nil
}
