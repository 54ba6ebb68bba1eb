package grpcidem_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/grpcidem/internal/testpb"
)

type orders struct {
	testpb.UnimplementedOrdersServer
	n int
}

func (o *orders) Create(_ context.Context, req *testpb.CreateRequest) (*testpb.Order, error) {
	o.n++
	return &testpb.Order{Id: fmt.Sprint("ord_", o.n), Item: req.Item, Qty: req.Qty}, nil
}

func Example() {
	eng, err := core.New(core.Config{}) // a memory store; redislock.New for many instances
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		// a recovery interceptor goes first
		grpcidem.UnaryServerInterceptor(eng),
	))
	testpb.RegisterOrdersServer(srv, &orders{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln) //nolint:errcheck
	defer srv.Stop()

	// The client interceptor sends a fresh key with every call and retries
	// with it; here the key is the caller's own, sent twice.
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewOrdersClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), grpcidem.KeyMetadata, "order-42")
	for range 2 {
		var header metadata.MD
		o, err := client.Create(ctx, &testpb.CreateRequest{Item: "book", Qty: 2}, grpc.Header(&header))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(o.Id, "replayed:", grpcidem.Replayed(header))
	}
	// Output:
	// ord_1 replayed: false
	// ord_1 replayed: true
}
