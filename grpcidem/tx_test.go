package grpcidem_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/grpcidem/internal/testpb"
)

// TestServerTx runs the server's suite in the transactional mode's shape,
// on idemtest's in-memory TxStore: the handler's metadata is held until
// its result has committed.
func TestServerTx(t *testing.T) {
	t.Parallel()
	testServer(t, idemtest.NewTxStore)
}

// With a TxStore, the handler's context carries the transaction, and a
// commit that fails answers Unavailable (ErrorInfo and RetryInfo as the
// store-unavailable refusal) instead of the reply, with none of the
// handler's metadata: nothing was kept, and the retry runs the handler.
func TestServerTxCommitFails(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{}
	inTx := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !idemtest.InTx(ctx) {
			return nil, status.Error(codes.FailedPrecondition, "no transaction in the handler's context")
		}
		return handler(ctx, req)
	}
	h := &harness{t: t, svc: svc, client: testpb.NewOrdersClient(serve(t, svc, grpcidem.UnaryServerInterceptor(eng), inTx))}
	k := idemtest.Key(t)

	store.FailCommits(true)
	r := h.call(order("book", 2), key(k)...)
	wantRefusal(t, r, codes.Unavailable, grpcidem.ReasonStoreUnavailable, true)
	if r.header.Get("x-order-id") != nil || r.trailer.Get("x-trailer") != nil {
		t.Fatalf("a failed commit sent the handler's metadata: header %v, trailer %v", r.header, r.trailer)
	}
	h.wantRuns(1)

	store.FailCommits(false)
	first := h.call(order("book", 2), key(k)...)
	wantOK(t, first)
	wantNotReplay(t, first)
	if first.reply.Id != "ord_2" || first.header.Get("x-order-id")[0] != "ord_2" || first.trailer.Get("x-trailer")[0] != "ord_2" {
		t.Fatalf("retry: %v, header %v, trailer %v; want ord_2 in all", first.reply, first.header, first.trailer)
	}
	wantReplayOf(t, h.call(order("book", 2), key(k)...), first)
	h.wantRuns(2)
}

// With a TxStore, an OK reply that cannot be stored (here, not the
// method's output type) rolls the handler's writes back: the client gets
// Unavailable, not a reply whose effects were undone.
func TestServerTxReplyNotStored(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Store: idemtest.NewTxStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	icpt := grpcidem.UnaryServerInterceptor(eng)
	method := testpb.Orders_Create_FullMethodName
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcidem.KeyMetadata, idemtest.Key(t)))
	req := order("book", 1)
	resp, err := icpt(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		return req, nil // a CreateRequest where Create answers an Order
	})
	if status.Code(err) != codes.Unavailable || resp != nil {
		t.Fatalf("reply of the wrong type in the transactional mode: %v, %v; want Unavailable and no reply", resp, err)
	}
}
