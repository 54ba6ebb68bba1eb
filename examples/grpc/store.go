package main

import (
	"context"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	ordersv1 "github.com/idem-go/idem/examples/grpc/proto/idem/examples/orders/v1"
)

// Redis keys of the orders, apart from the HTTP examples' ones.
const (
	redisList = "idem-example:grpc-orders"
	redisSeq  = "idem-example:grpc-order-seq"
)

// store keeps the orders in memory, or in Redis so that every instance
// lists what was really created.
type store struct {
	rdb redis.UniversalClient // nil: in memory
	mu  sync.Mutex
	mem []*ordersv1.Order
}

func newStore(rdb redis.UniversalClient) *store { return &store{rdb: rdb} }

func (s *store) create(ctx context.Context, item string, qty int32) (*ordersv1.Order, error) {
	o := &ordersv1.Order{Item: item, Qty: qty}
	if s.rdb == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		o.Id = "ord_" + strconv.Itoa(len(s.mem)+1)
		s.mem = append(s.mem, o)
		return o, nil
	}
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
	if s.rdb == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]*ordersv1.Order(nil), s.mem...), nil
	}
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
