package grpcidem_test

import (
	"context"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/grpcidem/internal/testpb"
)

// The benchmarks call a server over an in-memory connection (bufconn), so
// they measure gRPC with and without the interceptor, not a network.
// Compare each case with "bare", the service without it: the difference is
// the cost of idem on the memory store.

type benchService struct {
	testpb.UnimplementedOrdersServer
}

func (benchService) Create(_ context.Context, req *testpb.CreateRequest) (*testpb.Order, error) {
	return &testpb.Order{Id: "ord_1", Item: req.Item, Qty: req.Qty}, nil
}

func benchClient(b *testing.B, interceptors ...grpc.UnaryServerInterceptor) testpb.OrdersClient {
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptors...))
	testpb.RegisterOrdersServer(srv, benchService{})
	go srv.Serve(ln) //nolint:errcheck
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return ln.Dial() }))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return testpb.NewOrdersClient(conn)
}

// run makes b.N calls; setKey, if not nil, sets the key of call i in md.
func run(b *testing.B, client testpb.OrdersClient, setKey func(md metadata.MD, i int)) {
	req := &testpb.CreateRequest{Item: "book", Qty: 2}
	md := metadata.MD{}
	ctx := metadata.NewOutgoingContext(context.Background(), md)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if setKey != nil {
			setKey(md, i)
		}
		if _, err := client.Create(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnary compares, in the same run, the bare service with the
// interceptor on the memory store: a call without a key (it passes), the
// replay of one stored key, and a first call with a fresh key every time
// (lock, run, capture, store).
func BenchmarkUnary(b *testing.B) {
	b.Run("bare", func(b *testing.B) { run(b, benchClient(b), nil) })
	b.Run("no-key", func(b *testing.B) {
		run(b, benchClient(b, grpcidem.UnaryServerInterceptor(idemtest.BenchEngine(b))), nil)
	})
	b.Run("replay", func(b *testing.B) {
		key := []string{"bench-replay"}
		run(b, benchClient(b, grpcidem.UnaryServerInterceptor(idemtest.BenchEngine(b))), func(md metadata.MD, _ int) {
			md[grpcidem.KeyMetadata] = key
		})
	})
	b.Run("first-call", func(b *testing.B) {
		key := []string{""}
		buf := make([]byte, 0, 32)
		run(b, benchClient(b, grpcidem.UnaryServerInterceptor(idemtest.BenchEngine(b))), func(md metadata.MD, i int) {
			key[0] = string(strconv.AppendInt(append(buf[:0], "bench-"...), int64(i), 10))
			md[grpcidem.KeyMetadata] = key
		})
	})
}
