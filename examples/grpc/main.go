// Command grpc is the order API of the examples over gRPC: service
// idem.examples.orders.v1.Orders, whose CreateOrder is protected by
// grpcidem's interceptor. It listens on $ADDR (default 127.0.0.1:9090),
// keeps keys and orders in memory, in Redis when REDIS_URL is set, or in
// PostgreSQL when DATABASE_URL is set (there the order, the key and the
// stored reply commit in one transaction; IDEM_TX=0: separate commits;
// with both, keys in Redis in front of PostgreSQL, core.NewTiered),
// scopes keys per user (metadata x-user-id), answers Unavailable rather
// than run unprotected when the store fails with IDEM_FAIL_CLOSED=1, serves
// the same handlers without idem with IDEM_OFF=1, and serves reflection,
// so that grpcurl can call it:
//
//	grpcurl -plaintext -H 'idempotency-key: k1' -d '{"item":"x","qty":1}' \
//		127.0.0.1:9090 idem.examples.orders.v1.Orders/CreateOrder
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/idem-go/idem/core"
	ordersv1 "github.com/idem-go/idem/examples/grpc/proto/idem/examples/orders/v1"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/redislock"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(logger); err != nil {
		log.Fatal(err)
	}
}

func run(logger *slog.Logger) error {
	cfg := core.Config{
		// The user is a stand-in for real authentication.
		Scope:    func(r *core.Request) string { return r.Header.Get("X-User-ID") },
		Observer: core.SlogObserver(logger), // FailClosed (IDEM_FAIL_CLOSED): in limits
	}
	var (
		rdb  redis.UniversalClient
		pool *pgxpool.Pool
	)
	if url := os.Getenv("DATABASE_URL"); url != "" {
		p, pg, err := setupPostgres(url)
		if err != nil {
			return err
		}
		defer p.Close()
		defer pg.Close()
		pool, cfg.Store = p, pg
		logger.Info("store: postgres", "transactional", os.Getenv("IDEM_TX") != "0")
		if url := os.Getenv("REDIS_URL"); url != "" {
			// Redis may be down at start: the tiered store falls back to
			// PostgreSQL, which holds every key and every order.
			c, err := redislock.NewClient(url)
			if err != nil {
				return err
			}
			defer c.Close()
			fast, err := redislock.New(c, nil)
			if err != nil {
				return err
			}
			cfg.Store = core.NewTiered(fast, pg)
			logger.Info("store: redis in front of postgres")
		}
	} else if url := os.Getenv("REDIS_URL"); url != "" {
		c, err := redislock.NewClient(url)
		if err != nil {
			return err
		}
		defer c.Close()
		// One dial's time: with its only store down at start, the example
		// exits with the error, not after go-redis's retries (about 20 s).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = c.Ping(ctx).Err()
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within 5s: %w", err)
		}
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		if cfg.Store, err = redislock.New(c, nil); err != nil {
			return err
		}
		rdb = c
		logger.Info("store: redis")
	} else {
		logger.Info("store: memory (set REDIS_URL to share keys between instances)")
	}
	if err := limits(&cfg, logger); err != nil {
		return err
	}
	eng, err := core.New(cfg)
	if err != nil {
		return err
	}

	interceptors := []grpc.UnaryServerInterceptor{recovery.UnaryServerInterceptor()} // outside: after a panic the key is released
	if os.Getenv("IDEM_OFF") == "1" {
		logger.Warn("IDEM_OFF=1: idempotency off: no request is covered, and the store logged holds the orders only")
	} else {
		interceptors = append(interceptors, grpcidem.UnaryServerInterceptor(eng, grpcidem.WithSkip(func(_ context.Context, method string) bool {
			return method == ordersv1.Orders_ListOrders_FullMethodName // a read: not covered
		})))
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptors...))
	ordersv1.RegisterOrdersServer(srv, &server{store: &store{rdb: rdb, pool: pool}, log: logger})
	reflection.Register(srv)

	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("ADDR"), "127.0.0.1:9090"))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("listening", "addr", ln.Addr().String(), "framework", "grpc")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Calls in flight may finish: one cut off would leave its key locked
	// until the lock expires.
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	return nil
}

type server struct {
	ordersv1.UnimplementedOrdersServer
	store *store
	log   *slog.Logger
}

func (s *server) CreateOrder(ctx context.Context, req *ordersv1.CreateOrderRequest) (*ordersv1.Order, error) {
	if req.DelayMs > 0 {
		select {
		case <-time.After(time.Duration(req.DelayMs) * time.Millisecond):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	switch {
	case req.Item == "":
		return nil, status.Error(codes.InvalidArgument, "invalid order: item is required")
	case strings.ContainsRune(req.Item, 0): // PostgreSQL's text refuses NUL
		return nil, status.Error(codes.InvalidArgument, "invalid order: item must not contain NUL")
	case req.Qty <= 0:
		return nil, status.Error(codes.InvalidArgument, "invalid order: qty must be positive")
	case req.Qty > maxQty:
		return nil, status.Errorf(codes.InvalidArgument, "invalid order: qty must be at most %d", maxQty)
	case req.Item == "boom":
		return nil, status.Error(codes.Internal, `the order service failed (item "boom")`)
	}
	o, err := s.store.create(ctx, req.Item, req.Qty)
	if err != nil {
		return nil, s.internal("create", err)
	}
	// Stored with the reply and replayed.
	grpc.SetHeader(ctx, metadata.Pairs("location", "/orders/"+o.Id)) //nolint:errcheck
	return o, nil
}

// maxQty is the largest qty, as over HTTP (examples/internal/orders, which
// this module cannot import).
const maxQty = 1_000_000

func (s *server) ListOrders(ctx context.Context, _ *ordersv1.ListOrdersRequest) (*ordersv1.ListOrdersResponse, error) {
	orders, err := s.store.list(ctx)
	if err != nil {
		return nil, s.internal("list", err)
	}
	return &ordersv1.ListOrdersResponse{Count: int32(len(orders)), Orders: orders}, nil
}

// internal logs err, the store's failure in op, and returns Internal with a
// fixed message: the error's text may name the database's types and echo the
// request's bytes.
func (s *server) internal(op string, err error) error {
	s.log.Error("order store failed", "op", op, "error", err)
	return status.Error(codes.Internal, "internal error")
}

// poolConns is the pool's size unless DATABASE_URL sets pool_max_conns:
// the transactional mode holds a connection per running keyed call.
const poolConns = 16

// setupPostgres connects to url, migrates idem's table and the orders', and
// returns the pool and idem's store on it: transactional unless IDEM_TX=0.
func setupPostgres(url string) (*pgxpool.Pool, interface {
	core.Store
	Close()
}, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	var pool *pgxpool.Pool
	if err == nil {
		if !strings.Contains(url, "pool_max_conns") {
			cfg.MaxConns = poolConns
		}
		pool, err = pgxpool.NewWithConfig(ctx, cfg)
	}
	if err == nil {
		err = pgstore.Migrate(ctx, pool, nil)
	}
	if err == nil {
		// Under an advisory lock: instances may start together, and
		// CREATE TABLE IF NOT EXISTS is not safe against itself.
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "idem_example_grpc_orders"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, ordersTable)
			return err
		})
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if os.Getenv("IDEM_TX") == "0" {
		s, err := pgstore.New(pool, nil)
		return pool, s, err
	}
	s, err := pgstore.NewTx(pool, nil)
	return pool, s, err
}
