// Command grpc is the order API of the examples over gRPC: service
// idem.examples.orders.v1.Orders, whose CreateOrder is protected by
// grpcidem's interceptor. It listens on $ADDR (default 127.0.0.1:9090),
// keeps keys and orders in memory, or in Redis when REDIS_URL is set, scopes
// keys per user (metadata x-user-id), and serves reflection, so that
// grpcurl can call it:
//
//	grpcurl -plaintext -H 'idempotency-key: k1' -d '{"item":"x","qty":1}' \
//		127.0.0.1:9090 idem.examples.orders.v1.Orders/CreateOrder
package main

import (
	"cmp"
	"context"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/idem-go/idem/core"
	ordersv1 "github.com/idem-go/idem/examples/grpc/proto/idem/examples/orders/v1"
	"github.com/idem-go/idem/grpcidem"
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
		Observer: core.SlogObserver(logger),
	}
	var rdb redis.UniversalClient
	if url := os.Getenv("REDIS_URL"); url != "" {
		c, err := redislock.NewClient(url)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err != nil {
			return err
		}
		rdb, cfg.Store = c, redislock.New(c, nil)
		logger.Info("store: redis")
	} else {
		logger.Info("store: memory (set REDIS_URL to share keys between instances)")
	}
	eng, err := core.New(cfg)
	if err != nil {
		return err
	}

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		recovery.UnaryServerInterceptor(), // outside: after a panic the key is released
		grpcidem.UnaryServerInterceptor(eng, grpcidem.WithSkip(func(_ context.Context, method string) bool {
			return method == ordersv1.Orders_ListOrders_FullMethodName // a read: not covered
		})),
	))
	ordersv1.RegisterOrdersServer(srv, &server{store: newStore(rdb)})
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
	case req.Qty <= 0:
		return nil, status.Error(codes.InvalidArgument, "invalid order: qty must be positive")
	case req.Item == "boom":
		return nil, status.Error(codes.Internal, `the order service failed (item "boom")`)
	}
	o, err := s.store.create(ctx, req.Item, req.Qty)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "create: %v", err)
	}
	// Stored with the reply and replayed.
	grpc.SetHeader(ctx, metadata.Pairs("location", "/orders/"+o.Id)) //nolint:errcheck
	return o, nil
}

func (s *server) ListOrders(ctx context.Context, _ *ordersv1.ListOrdersRequest) (*ordersv1.ListOrdersResponse, error) {
	orders, err := s.store.list(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "list: %v", err)
	}
	return &ordersv1.ListOrdersResponse{Count: int32(len(orders)), Orders: orders}, nil
}
