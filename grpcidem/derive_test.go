package grpcidem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/grpcidem/internal/testpb"
)

// Work running under a key sends the key core.DerivedKey gives for the
// connection's target and the method: the same when the work runs again.
func TestClientDerivedKey(t *testing.T) {
	t.Parallel()
	f := &flaky{}
	target := serve(t, f).Target()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testpb.NewOrdersClient(cc)
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	errAgain := errors.New("fail after the call: the work runs again")
	var want []string
	work := func(ctx context.Context) (string, error) {
		if _, err := client.Create(ctx, order("book", 1)); err != nil {
			return "", err
		}
		k, _ := core.DerivedKey(ctx, target+testpb.Orders_Create_FullMethodName)
		want = append(want, k+"|")
		if len(want) == 1 {
			return "", errAgain
		}
		return "done", nil
	}
	if _, _, err := core.Do(context.Background(), eng, "s", "k1", work); !errors.Is(err, errAgain) {
		t.Fatal(err)
	}
	if _, _, err := core.Do(context.Background(), eng, "s", "k1", work); err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Do(context.Background(), eng, "s", "k2", work); err != nil {
		t.Fatal(err)
	}
	if len(f.keys) != 3 || f.keys[0] != want[0] || f.keys[1] != want[1] || f.keys[2] != want[2] {
		t.Fatalf("keys sent %q, want %q", f.keys, want)
	}
	if f.keys[0] != f.keys[1] || f.keys[1] == f.keys[2] {
		t.Fatalf("keys sent %q: want the first two equal (one key run twice), the third another", f.keys)
	}
}

// stepService charges in a step, then fails with Internal (not stored) on
// the first call: the retry gets the charge's checkpoint.
type stepService struct {
	testpb.UnimplementedOrdersServer
	charges, calls int
}

func (s *stepService) Create(ctx context.Context, req *testpb.CreateRequest) (*testpb.Order, error) {
	s.calls++
	ch, err := core.Step(ctx, "charge", func(context.Context) (string, error) {
		s.charges++
		return fmt.Sprint("ch_", s.charges), nil
	})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if s.calls == 1 {
		return nil, status.Error(codes.Internal, "failed after the charge")
	}
	return &testpb.Order{Id: ch, Item: req.Item}, nil
}

// Steps work in a gRPC handler: the call's key holds their checkpoints.
func TestServerSteps(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc := &stepService{}
	client := testpb.NewOrdersClient(serve(t, svc, grpcidem.UnaryServerInterceptor(eng)))
	ctx := metadata.AppendToOutgoingContext(context.Background(), grpcidem.KeyMetadata, "k-steps")
	if _, err := client.Create(ctx, order("book", 1)); status.Code(err) != codes.Internal {
		t.Fatalf("first call: %v, want Internal", err)
	}
	o, err := client.Create(ctx, order("book", 1))
	if err != nil || o.GetId() != "ch_1" || svc.charges != 1 {
		t.Fatalf("retry: %v, %v, %d charges; want the first charge's checkpoint", o, err, svc.charges)
	}
}
