package grpcidem_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/grpcidem/internal/testpb"
)

// infoService records the key each call's handler runs under.
type infoService struct {
	testpb.UnimplementedOrdersServer
	keys chan string
}

func (s *infoService) Create(ctx context.Context, req *testpb.CreateRequest) (*testpb.Order, error) {
	info, ok := core.InfoFromContext(ctx)
	if !ok {
		s.keys <- "-"
	} else {
		s.keys <- info.Key + "/" + info.Scope
	}
	return &testpb.Order{Id: "ord", Item: req.Item}, nil
}

// The handler reads the key and scope it runs under from its context.
func TestInfoFromContext(t *testing.T) {
	eng, err := core.New(core.Config{Scope: func(r *core.Request) string { return r.Header.Get("x-user-id") }})
	if err != nil {
		t.Fatal(err)
	}
	svc := &infoService{keys: make(chan string, 2)}
	client := testpb.NewOrdersClient(serve(t, svc, grpcidem.UnaryServerInterceptor(eng)))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "k-1", "x-user-id", "u-7")
	if _, err := client.Create(ctx, &testpb.CreateRequest{Item: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Create(context.Background(), &testpb.CreateRequest{Item: "x"}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	if got := []string{<-svc.keys, <-svc.keys}; got[0] != "k-1/u-7" || got[1] != "-" {
		t.Fatalf("handlers saw %q, want [k-1/u-7 -]", got)
	}
}
