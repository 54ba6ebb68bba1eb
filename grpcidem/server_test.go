package grpcidem_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/grpcidem/internal/testpb"
	"github.com/idem-go/idem/idemkey"
	"github.com/idem-go/idem/redislock"
)

// service is the test service. Create and Update count their runs, set
// header and trailer metadata, and answer by item: "panic" panics on the
// first run, "invalid" fails with InvalidArgument and a BadRequest detail,
// "internal" with Internal, "nil" returns a nil *Order (gRPC sends an
// empty one), "big" returns a 2 KiB note; anything else gets
// an order whose id is its run's number, so a second run shows.
type service struct {
	testpb.UnimplementedOrdersServer
	runs    atomic.Int64
	started chan struct{} // if not nil, told when a run starts
	hold    chan struct{} // if not nil, a run waits for it to close
}

func (s *service) Create(ctx context.Context, req *testpb.CreateRequest) (*testpb.Order, error) {
	n := s.runs.Add(1)
	if s.started != nil {
		s.started <- struct{}{}
	}
	if s.hold != nil {
		<-s.hold
	}
	switch req.Item {
	case "panic":
		if n == 1 {
			panic("the handler failed")
		}
	case "invalid":
		st, _ := status.New(codes.InvalidArgument, "qty must be positive").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "qty", Description: "must be positive"}}})
		return nil, st.Err()
	case "internal":
		return nil, status.Error(codes.Internal, "database down")
	case "nil":
		return nil, nil
	}
	id := "ord_" + strconv.FormatInt(n, 10)
	grpc.SetHeader(ctx, metadata.Pairs("x-order-id", id, "x-request-id", "req-"+id)) //nolint:errcheck
	grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", id))                            //nolint:errcheck
	o := &testpb.Order{Id: id, Item: req.Item, Qty: req.Qty}
	if req.Item == "big" {
		o.Note = make([]byte, 2048)
	}
	return o, nil
}

func (s *service) Update(ctx context.Context, req *testpb.CreateRequest) (*testpb.Order, error) {
	return s.Create(ctx, req)
}

func (s *service) Watch(req *testpb.CreateRequest, stream grpc.ServerStreamingServer[testpb.Order]) error {
	n := s.runs.Add(1)
	return stream.Send(&testpb.Order{Id: "ord_" + strconv.FormatInt(n, 10), Item: req.Item})
}

// recoverUnary is the recovery interceptor an application puts outside
// grpcidem's: a panic becomes Internal.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(ctx, req)
}

// harness is a test server on a loopback TCP port, with its client.
type harness struct {
	t      *testing.T
	svc    *service
	client testpb.OrdersClient
}

// serve starts a gRPC server on 127.0.0.1 with the interceptors (the
// recovery interceptor first) and returns a client connection to it.
func serve(t testing.TB, svc testpb.OrdersServer, interceptors ...grpc.UnaryServerInterceptor) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{recoverUnary}, interceptors...)...))
	testpb.RegisterOrdersServer(srv, svc)
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// start serves a fresh service through the interceptor on an Engine of
// cfg.
func start(t *testing.T, cfg core.Config, opts ...grpcidem.Option) *harness {
	t.Helper()
	if cfg.StoreTimeout == 0 {
		// A loaded machine may take more than the default second per store
		// call, which would run the handler unprotected (fail-open).
		cfg.StoreTimeout = 30 * time.Second
	}
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{}
	conn := serve(t, svc, grpcidem.UnaryServerInterceptor(eng, opts...))
	return &harness{t: t, svc: svc, client: testpb.NewOrdersClient(conn)}
}

// result is what a call got.
type result struct {
	reply           *testpb.Order
	err             error
	header, trailer metadata.MD
}

// call calls Create with the metadata pairs md (a key: "idempotency-key", k).
func (h *harness) call(req *testpb.CreateRequest, md ...string) result {
	return h.callMethod(h.client.Create, req, md...)
}

func (h *harness) callMethod(
	m func(context.Context, *testpb.CreateRequest, ...grpc.CallOption) (*testpb.Order, error), req *testpb.CreateRequest, md ...string,
) result {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r result
	r.reply, r.err = m(metadata.AppendToOutgoingContext(ctx, md...), req, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

func (h *harness) wantRuns(want int64) {
	h.t.Helper()
	if got := h.svc.runs.Load(); got != want {
		h.t.Fatalf("handler ran %d times, want %d", got, want)
	}
}

func key(k string) []string { return []string{grpcidem.KeyMetadata, k} }

func order(item string, qty int32) *testpb.CreateRequest {
	return &testpb.CreateRequest{Item: item, Qty: qty}
}

func wantOK(t *testing.T, r result) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("call failed: %v", r.err)
	}
}

// wantReplayOf checks that r replays first: same reply and metadata, marked.
func wantReplayOf(t *testing.T, r, first result) {
	t.Helper()
	wantOK(t, r)
	if !proto.Equal(r.reply, first.reply) {
		t.Fatalf("replay %v, want %v", r.reply, first.reply)
	}
	if !grpcidem.Replayed(r.header) {
		t.Fatalf("replay header %v, want %s: true", r.header, grpcidem.ReplayMetadata)
	}
	if got, want := r.header.Get("x-order-id"), first.header.Get("x-order-id"); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("replayed x-order-id %v, want %v", got, want)
	}
	if got, want := r.trailer.Get("x-trailer"), first.trailer.Get("x-trailer"); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("replayed trailer x-trailer %v, want %v", got, want)
	}
	if got := r.header.Get("x-request-id"); got != nil {
		t.Fatalf("replay has x-request-id %v: a denied header was stored", got)
	}
}

func wantNotReplay(t *testing.T, r result) {
	t.Helper()
	if grpcidem.Replayed(r.header) {
		t.Fatalf("call marked as a replay: %v", r.header)
	}
}

// wantRefusal checks r's code and the ErrorInfo reason of the interceptor,
// and whether a RetryInfo came with it.
func wantRefusal(t *testing.T, r result, code codes.Code, reason string, retry bool) {
	t.Helper()
	st := status.Convert(r.err)
	if st.Code() != code {
		t.Fatalf("code %s (%v), want %s", st.Code(), r.err, code)
	}
	var gotReason string
	var gotRetry bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.Domain != grpcidem.ErrorDomain {
				t.Fatalf("ErrorInfo domain %q", d.Domain)
			}
			gotReason = d.Reason
		case *errdetails.RetryInfo:
			gotRetry = d.RetryDelay.AsDuration() > 0
		}
	}
	if gotReason != reason || gotRetry != retry {
		t.Fatalf("details %v: reason %q, RetryInfo %v; want %q, %v", st.Details(), gotReason, gotRetry, reason, retry)
	}
}

// testServer runs the server's suite on the stores newStore returns.
func testServer(t *testing.T, newStore func(t *testing.T) core.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, newStore func(*testing.T) core.Store)
	}{
		{"Replay", testReplay},
		{"Mismatch", testMismatch},
		{"DeterministicFingerprint", testDeterministicFingerprint},
		{"UnknownFields", testUnknownFields},
		{"ConcurrentDuplicates", testConcurrentDuplicates},
		{"ConcurrentDuplicatesHeld", testConcurrentDuplicatesHeld},
		{"ConcurrentDuplicatesWait", testConcurrentDuplicatesWait},
		{"PanicReleasesKey", testPanicReleasesKey},
		{"ClientGoneMetadata", testClientGoneMetadata},
		{"OuterSendsHeader", testOuterSendsHeader},
		{"StoredError", testStoredError},
		{"InternalNotStored", testInternalNotStored},
		{"NilReply", testNilReply},
		{"StorePolicy", testStorePolicy},
		{"Keys", testKeys},
		{"Scope", testScope},
		{"ReplyOmitted", testReplyOmitted},
		{"StoragePolicy", testStoragePolicy},
		{"Skip", testSkip},
		{"StreamsPassThrough", testStreams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newStore)
		})
	}
}

func TestServerMemory(t *testing.T) {
	t.Parallel()
	testServer(t, func(*testing.T) core.Store { return core.NewMemoryStore(0) })
}

func TestServerMiniredis(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	testServer(t, func(t *testing.T) core.Store {
		s, err := redislock.New(c, &redislock.Options{Prefix: "t" + strconv.FormatInt(rnd.Add(1), 10)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

var rnd atomic.Int64

func testReplay(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	k := idemtest.Key(t)
	first := h.call(order("book", 2), key(k)...)
	wantOK(t, first)
	wantNotReplay(t, first)
	if first.reply.Id != "ord_1" || first.header.Get("x-order-id")[0] != "ord_1" {
		t.Fatalf("first call: %v, header %v", first.reply, first.header)
	}
	for range 2 {
		wantReplayOf(t, h.call(order("book", 2), key(k)...), first)
	}
	// The legacy name reaches the same record.
	wantReplayOf(t, h.call(order("book", 2), grpcidem.LegacyKeyMetadata, k), first)
	h.wantRuns(1)
}

// testStoragePolicy checks that replays follow the Engine's storage policy:
// KeepHeaders keeps only the named metadata (trailers too), DeniedHeaders
// drops more than the base list.
func testStoragePolicy(t *testing.T, newStore func(*testing.T) core.Store) {
	for _, tc := range []struct {
		name            string
		cfg             core.Config
		header, trailer bool // x-order-id and x-trailer replayed
	}{
		{"keep", core.Config{KeepHeaders: []string{"X-Order-Id"}}, true, false},
		{"keep trailer", core.Config{KeepHeaders: []string{"x-trailer"}}, false, true},
		{"deny", core.Config{DeniedHeaders: []string{"X-Order-Id"}}, false, true},
		{"empty keep is unset", core.Config{KeepHeaders: []string{}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Store = newStore(t)
			h := start(t, tc.cfg)
			k := idemtest.Key(t)
			wantOK(t, h.call(order("book", 2), key(k)...))
			r := h.call(order("book", 2), key(k)...)
			wantOK(t, r)
			if !grpcidem.Replayed(r.header) {
				t.Fatalf("not a replay: %v", r.header)
			}
			if got := r.header.Get("x-order-id") != nil; got != tc.header {
				t.Errorf("x-order-id replayed: %v, want %v (%v)", got, tc.header, r.header)
			}
			if got := r.trailer.Get("x-trailer") != nil; got != tc.trailer {
				t.Errorf("x-trailer replayed: %v, want %v (%v)", got, tc.trailer, r.trailer)
			}
			h.wantRuns(1)
		})
	}
}

func testMismatch(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	k := idemtest.Key(t)
	wantOK(t, h.call(order("book", 2), key(k)...))
	wantRefusal(t, h.call(order("book", 3), key(k)...), codes.AlreadyExists, grpcidem.ReasonKeyReused, false)
	// The same message to another method is another request.
	wantRefusal(t, h.callMethod(h.client.Update, order("book", 2), key(k)...), codes.AlreadyExists, grpcidem.ReasonKeyReused, false)
	h.wantRuns(1)
}

func testDeterministicFingerprint(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	labels := func() map[string]string {
		m := make(map[string]string)
		for i := range 50 {
			m["label-"+strconv.Itoa(i)] = strconv.Itoa(i)
		}
		return m
	}
	k := idemtest.Key(t)
	first := h.call(&testpb.CreateRequest{Item: "book", Qty: 1, Labels: labels()}, key(k)...)
	wantOK(t, first)
	for range 3 { // maps are encoded in key order, whatever Go's iteration order
		wantReplayOf(t, h.call(&testpb.CreateRequest{Item: "book", Qty: 1, Labels: labels()}, key(k)...), first)
	}
	h.wantRuns(1)
}

// mapEntry is the encoding of an entry of a map<string, string> field
// numbered 9, which the test service does not know: a newer client's.
func mapEntry(k, v string) []byte {
	e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), k)
	e = protowire.AppendString(protowire.AppendTag(e, 2, protowire.BytesType), v)
	return protowire.AppendBytes(protowire.AppendTag(nil, 9, protowire.BytesType), e)
}

// testUnknownFields sends a field of a newer schema, a map that Go encodes
// in random order, in two orders: one request, and the retry replays.
func testUnknownFields(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	withLabels := func(entries ...[]byte) *testpb.CreateRequest {
		req := order("book", 1)
		req.ProtoReflect().SetUnknown(slices.Concat(entries...))
		return req
	}
	a, b := mapEntry("a", "1"), mapEntry("b", "2")
	k := idemtest.Key(t)
	first := h.call(withLabels(a, b), key(k)...)
	wantOK(t, first)
	wantReplayOf(t, h.call(withLabels(b, a), key(k)...), first)
	h.wantRuns(1)
	// A known field still tells two requests apart.
	other := withLabels(a, b)
	other.Qty = 2
	wantRefusal(t, h.call(other, key(k)...), codes.AlreadyExists, grpcidem.ReasonKeyReused, false)
	h.wantRuns(1)
}

// concurrently makes n calls of one key at once and returns their results.
func concurrently(h *harness, n int, k string) []result {
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.call(order("book", 1), key(k)...)
		}()
	}
	wg.Wait()
	return results
}

func testConcurrentDuplicates(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	results := concurrently(h, 200, idemtest.Key(t))
	h.wantRuns(1)
	var ok int
	for _, r := range results {
		switch status.Code(r.err) {
		case codes.OK:
			if r.reply.Id != "ord_1" {
				t.Fatalf("reply %v, want ord_1", r.reply)
			}
			ok++
		case codes.Aborted:
			wantRefusal(t, r, codes.Aborted, grpcidem.ReasonKeyInFlight, true)
		default:
			t.Fatalf("call: %v", r.err)
		}
	}
	if ok == 0 {
		t.Fatal("no call got the reply")
	}
}

// testConcurrentDuplicatesHeld holds the first call in the handler until
// every duplicate has its answer: all of them are Aborted, in flight.
func testConcurrentDuplicatesHeld(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	h.svc.hold = make(chan struct{})
	const n = 200
	k := idemtest.Key(t)
	results := make(chan result, n)
	for range n {
		go func() { results <- h.call(order("book", 1), key(k)...) }()
	}
	for range n - 1 {
		wantRefusal(t, <-results, codes.Aborted, grpcidem.ReasonKeyInFlight, true)
	}
	close(h.svc.hold)
	r := <-results
	wantOK(t, r)
	wantNotReplay(t, r)
	h.wantRuns(1)
}

func testConcurrentDuplicatesWait(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t), Wait: time.Minute})
	h.svc.started, h.svc.hold = make(chan struct{}, 1), make(chan struct{})
	go func() { <-h.svc.started; close(h.svc.hold) }()
	for _, r := range concurrently(h, 200, idemtest.Key(t)) {
		wantOK(t, r)
		if r.reply.Id != "ord_1" {
			t.Fatalf("reply %v, want ord_1: every waiting call gets the first one's", r.reply)
		}
	}
	h.wantRuns(1)
}

func testPanicReleasesKey(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	k := idemtest.Key(t)
	r := h.call(order("panic", 1), key(k)...)
	if status.Code(r.err) != codes.Internal || !strings.Contains(r.err.Error(), "the handler failed") {
		t.Fatalf("panicking call: %v, want the recovery interceptor's Internal", r.err)
	}
	retry := h.call(order("panic", 1), key(k)...)
	wantOK(t, retry)
	wantNotReplay(t, retry)
	h.wantRuns(2)
	wantReplayOf(t, h.call(order("panic", 1), key(k)...), retry)
	h.wantRuns(2)
}

// A call whose client went away before the handler set its metadata (gRPC
// then refuses it on the stream it closed): the reply is stored with the
// metadata, and the retry gets both replayed.
func testClientGoneMetadata(t *testing.T, newStore func(*testing.T) core.Store) {
	eng, err := core.New(core.Config{Store: newStore(t), StoreTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{}, 1)
	var held atomic.Bool
	afterGone := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if held.CompareAndSwap(false, true) { // the first call only
			entered <- struct{}{}
			select {
			case <-ctx.Done():
				time.Sleep(20 * time.Millisecond) // gRPC closes the stream just after it cancels ctx
			case <-time.After(10 * time.Second):
			}
		}
		return handler(ctx, req)
	}
	h := &harness{t: t, svc: &service{}}
	h.client = testpb.NewOrdersClient(serve(t, h.svc, grpcidem.UnaryServerInterceptor(eng), afterGone))
	k := idemtest.Key(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	if _, err := h.client.Create(metadata.AppendToOutgoingContext(ctx, key(k)...), order("book", 1)); status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled call: %v", err)
	}
	var r result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if r = h.call(order("book", 1), key(k)...); status.Code(r.err) != codes.Aborted || time.Now().After(deadline) {
			break
		}
	}
	first := result{reply: &testpb.Order{Id: "ord_1", Item: "book", Qty: 1},
		header: metadata.Pairs("x-order-id", "ord_1"), trailer: metadata.Pairs("x-trailer", "ord_1")}
	wantReplayOf(t, r, first)
	h.wantRuns(1)
}

// An interceptor before grpcidem that sends the header before the call
// runs: the replay's header can no longer be set, and its mark comes in the
// trailer rather than not at all.
func testOuterSendsHeader(t *testing.T, newStore func(*testing.T) core.Store) {
	eng, err := core.New(core.Config{Store: newStore(t), StoreTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	outer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := grpc.SendHeader(ctx, metadata.Pairs("x-outer", "1")); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	h := &harness{t: t, svc: &service{}}
	h.client = testpb.NewOrdersClient(serve(t, h.svc, outer, grpcidem.UnaryServerInterceptor(eng)))
	k := idemtest.Key(t)
	first := h.call(order("book", 1), key(k)...)
	wantOK(t, first)
	wantNotReplay(t, first)
	if grpcidem.Replayed(first.trailer) {
		t.Fatalf("first call's trailer marked as a replay: %v", first.trailer)
	}
	r := h.call(order("book", 1), key(k)...)
	wantOK(t, r)
	if !proto.Equal(r.reply, first.reply) {
		t.Fatalf("replay %v, want %v", r.reply, first.reply)
	}
	if !grpcidem.Replayed(r.trailer) {
		t.Fatalf("replay unmarked: header %v, trailer %v", r.header, r.trailer)
	}
	if got := r.trailer.Get("x-trailer"); len(got) != 1 || got[0] != "ord_1" {
		t.Fatalf("replayed trailer x-trailer %v, want [ord_1]", got)
	}
	h.wantRuns(1)
}

func testStoredError(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	k := idemtest.Key(t)
	first := h.call(order("invalid", 1), key(k)...)
	second := h.call(order("invalid", 1), key(k)...)
	h.wantRuns(1)
	st1, st2 := status.Convert(first.err), status.Convert(second.err)
	if st1.Code() != codes.InvalidArgument || !proto.Equal(st1.Proto(), st2.Proto()) {
		t.Fatalf("replayed status %v, want %v", st2.Proto(), st1.Proto())
	}
	if len(st2.Details()) != 1 {
		t.Fatalf("replayed details %v, want the BadRequest", st2.Details())
	}
	wantNotReplay(t, first)
	if !grpcidem.Replayed(second.header) {
		t.Fatalf("replayed error's header %v, want %s", second.header, grpcidem.ReplayMetadata)
	}
}

func testInternalNotStored(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	k := idemtest.Key(t)
	for range 2 {
		r := h.call(order("internal", 1), key(k)...)
		if status.Code(r.err) != codes.Internal {
			t.Fatalf("call: %v, want Internal", r.err)
		}
		wantNotReplay(t, r)
	}
	h.wantRuns(2)
}

// testNilReply checks that a nil reply, which gRPC answers as an empty
// message, is stored as one: the handler ran, a retry replays it.
func testNilReply(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)})
	k := idemtest.Key(t)
	first := h.call(order("nil", 1), key(k)...)
	wantOK(t, first)
	wantNotReplay(t, first)
	r := h.call(order("nil", 1), key(k)...)
	wantOK(t, r)
	if !grpcidem.Replayed(r.header) || !proto.Equal(r.reply, first.reply) || !proto.Equal(r.reply, &testpb.Order{}) {
		t.Fatalf("retry: %v, header %v; want a replay of the empty order", r.reply, r.header)
	}
	h.wantRuns(1)
}

func testStorePolicy(t *testing.T, newStore func(*testing.T) core.Store) {
	// A policy that stores nothing: every call runs.
	h := start(t, core.Config{Store: newStore(t)}, grpcidem.WithStorable(func(codes.Code) bool { return false }))
	k := idemtest.Key(t)
	for range 2 {
		r := h.call(order("book", 1), key(k)...)
		wantOK(t, r)
		wantNotReplay(t, r)
	}
	h.wantRuns(2)
}

func testKeys(t *testing.T, newStore func(*testing.T) core.Store) {
	var invalid atomic.Int64
	observer := func(ev core.Event) {
		if ev.Outcome == core.OutcomeInvalidKey && ev.Transport == "grpc" && ev.Code == int(codes.InvalidArgument) &&
			ev.Method == "/idem.grpcidem.testpb.Orders/Create" {
			invalid.Add(1)
		}
	}
	t.Run("optional", func(t *testing.T) {
		h := start(t, core.Config{Store: newStore(t), Observer: observer})
		for range 2 {
			r := h.call(order("book", 1))
			wantOK(t, r)
			wantNotReplay(t, r)
		}
		h.wantRuns(2)
		long := strings.Repeat("k", 256)
		for _, tt := range []struct {
			md   []string
			want string // the message, which names the metadata keys
		}{
			{key(long), "invalid idempotency key: key is 256 bytes long, the limit is 255"},
			{key(""), "invalid idempotency key: empty key"},
			{[]string{grpcidem.KeyMetadata, "a", grpcidem.KeyMetadata, "b"}, "invalid idempotency key: 2 values of idempotency-key, want one"},
			{[]string{grpcidem.KeyMetadata, "a", grpcidem.LegacyKeyMetadata, "b"},
				"invalid idempotency key: idempotency-key and x-idempotency-key differ"},
		} {
			r := h.call(order("book", 1), tt.md...)
			wantRefusal(t, r, codes.InvalidArgument, grpcidem.ReasonInvalidKey, false)
			if got := status.Convert(r.err).Message(); got != tt.want {
				t.Errorf("message %q, want %q", got, tt.want)
			}
		}
		h.wantRuns(2)
	})
	t.Run("required", func(t *testing.T) {
		h := start(t, core.Config{Store: newStore(t), Required: true, ValidateKey: idemkey.UUIDv4, Observer: observer})
		wantRefusal(t, h.call(order("book", 1)), codes.InvalidArgument, grpcidem.ReasonMissingKey, false)
		wantRefusal(t, h.call(order("book", 1), key("not-a-uuid")...), codes.InvalidArgument, grpcidem.ReasonInvalidKey, false)
		wantOK(t, h.call(order("book", 1), key("0b7f8e9c-7d4a-4b7e-9c1d-2f3a4b5c6d7e")...))
		h.wantRuns(1)
	})
	if got := invalid.Load(); got != 6 {
		t.Fatalf("%d invalid key events with the method and InvalidArgument, want 6", got)
	}
}

// With custom headers, the message names their metadata keys whole, even
// when one name starts the other, and Config.ValidateKey's message is the
// app's, not rewritten where it holds a header's name.
func TestInvalidKeyMessageNames(t *testing.T) {
	h := start(t, core.Config{KeyHeader: "Key", LegacyKeyHeader: "Key-Legacy", ValidateKey: func(k string) error {
		if k != "ok" {
			return errors.New("Keys are ok, or Keyless")
		}
		return nil
	}})
	for _, tt := range []struct {
		md   []string
		want string
	}{
		{[]string{"key", "ok", "key-legacy", "other"}, "invalid idempotency key: key and key-legacy differ"},
		{[]string{"key-legacy", "a", "key-legacy", "b"}, "invalid idempotency key: 2 values of key-legacy, want one"},
		{[]string{"key", "bad"}, "invalid idempotency key: Keys are ok, or Keyless"},
	} {
		r := h.call(order("book", 1), tt.md...)
		wantRefusal(t, r, codes.InvalidArgument, grpcidem.ReasonInvalidKey, false)
		if got := status.Convert(r.err).Message(); got != tt.want {
			t.Errorf("message %q, want %q", got, tt.want)
		}
	}
	h.wantRuns(0)
}

func testScope(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t), Scope: func(r *core.Request) string {
		if r.Method != "/idem.grpcidem.testpb.Orders/Create" || r.Route != r.Method {
			return "unexpected request " + r.Method
		}
		return r.Header.Get("X-User-ID")
	}})
	k := idemtest.Key(t)
	alice := h.call(order("book", 1), grpcidem.KeyMetadata, k, "x-user-id", "alice")
	bob := h.call(order("book", 1), grpcidem.KeyMetadata, k, "x-user-id", "bob")
	wantOK(t, alice)
	wantOK(t, bob)
	wantNotReplay(t, bob)
	h.wantRuns(2)
	wantReplayOf(t, h.call(order("book", 1), grpcidem.KeyMetadata, k, "x-user-id", "alice"), alice)
	h.wantRuns(2)
}

func testReplyOmitted(t *testing.T, newStore func(*testing.T) core.Store) {
	var replays []int // the codes of the replays' events
	var mu sync.Mutex
	observer := func(ev core.Event) {
		if ev.Outcome == core.OutcomeReplay {
			mu.Lock()
			replays = append(replays, ev.Code)
			mu.Unlock()
		}
	}
	h := start(t, core.Config{Store: newStore(t), MaxStoredBodyBytes: 1024, Observer: observer})
	k := idemtest.Key(t)
	first := h.call(order("big", 1), key(k)...)
	wantOK(t, first)
	if len(first.reply.Note) != 2048 {
		t.Fatalf("first call's note has %d bytes", len(first.reply.Note))
	}
	r := h.call(order("big", 1), key(k)...)
	wantRefusal(t, r, codes.FailedPrecondition, grpcidem.ReasonReplyOmitted, false)
	if v := r.header.Get("x-idempotency-body-omitted"); len(v) != 1 || !strings.HasPrefix(v[0], "sha256=") {
		t.Fatalf("omitted reply's header %v", r.header)
	}
	h.wantRuns(1)
	mu.Lock()
	defer mu.Unlock()
	if want := []int{int(codes.FailedPrecondition)}; !slices.Equal(replays, want) {
		t.Fatalf("replay events of codes %v, want %v: the code the client got", replays, want)
	}
}

func testSkip(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t)}, grpcidem.WithSkip(func(_ context.Context, m string) bool {
		return m == testpb.Orders_Update_FullMethodName
	}))
	k := idemtest.Key(t)
	for range 2 {
		r := h.callMethod(h.client.Update, order("book", 1), key(k)...)
		wantOK(t, r)
		wantNotReplay(t, r)
	}
	h.wantRuns(2)
}

func testStreams(t *testing.T, newStore func(*testing.T) core.Store) {
	h := start(t, core.Config{Store: newStore(t), Required: true})
	k := idemtest.Key(t)
	for range 2 {
		ctx := metadata.AppendToOutgoingContext(context.Background(), key(k)...)
		stream, err := h.client.Watch(ctx, order("book", 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	h.wantRuns(2)
}

// downStore fails every operation.
type downStore struct{}

var errDown = errors.New("store down")

func (downStore) Acquire(context.Context, string, time.Duration) ([]byte, string, error) {
	return nil, "", errDown
}
func (downStore) Complete(context.Context, string, string, []byte, time.Duration) error {
	return errDown
}
func (downStore) Release(context.Context, string, string) error { return errDown }
func (downStore) Refresh(context.Context, string, string, time.Duration) error {
	return errDown
}

func TestStoreDown(t *testing.T) {
	t.Parallel()
	t.Run("fail-closed", func(t *testing.T) {
		h := start(t, core.Config{Store: downStore{}, FailClosed: true, RetryAfter: 3 * time.Second})
		r := h.call(order("book", 1), key("k")...)
		wantRefusal(t, r, codes.Unavailable, grpcidem.ReasonStoreUnavailable, true)
		for _, d := range status.Convert(r.err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay.AsDuration() != 3*time.Second {
				t.Fatalf("RetryInfo %v, want Config.RetryAfter", ri.RetryDelay.AsDuration())
			}
		}
		h.wantRuns(0)
	})
	t.Run("fail-open", func(t *testing.T) {
		h := start(t, core.Config{Store: downStore{}})
		for range 2 {
			r := h.call(order("book", 1), key("k")...)
			wantOK(t, r)
			wantNotReplay(t, r)
		}
		h.wantRuns(2)
	})
}

// Every event of a call carries the gRPC code the client got, refusals
// included, with Transport "grpc".
func TestEventCodes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []core.Event
	observer := func(ev core.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}
	h := start(t, core.Config{Observer: observer})
	h.svc.started, h.svc.hold = make(chan struct{}, 1), make(chan struct{})
	k := idemtest.Key(t)
	first := make(chan result, 1)
	go func() { first <- h.call(order("book", 1), key(k)...) }()
	<-h.svc.started
	wantRefusal(t, h.call(order("book", 1), key(k)...), codes.Aborted, grpcidem.ReasonKeyInFlight, true)
	close(h.svc.hold)
	wantOK(t, <-first)
	wantOK(t, h.call(order("book", 1), key(k)...))
	wantRefusal(t, h.call(order("book", 2), key(k)...), codes.AlreadyExists, grpcidem.ReasonKeyReused, false)
	if r := h.call(order("internal", 1), key(idemtest.Key(t))...); status.Code(r.err) != codes.Internal {
		t.Fatalf("internal: %v", r.err)
	}
	down := start(t, core.Config{Store: downStore{}, FailClosed: true, Observer: observer})
	wantRefusal(t, down.call(order("book", 1), key(k)...), codes.Unavailable, grpcidem.ReasonStoreUnavailable, true)

	want := []struct {
		outcome core.Outcome
		code    codes.Code
	}{
		{core.OutcomeConflict, codes.Aborted},
		{core.OutcomeStored, codes.OK},
		{core.OutcomeReplay, codes.OK},
		{core.OutcomeMismatch, codes.AlreadyExists},
		{core.OutcomeNotStored, codes.Internal},
		{core.OutcomeStoreError, codes.Unavailable},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != len(want) {
		t.Fatalf("%d events %v, want %d", len(events), events, len(want))
	}
	for i, w := range want {
		if ev := events[i]; ev.Outcome != w.outcome || ev.Transport != "grpc" || codes.Code(ev.Code) != w.code {
			t.Errorf("event %d: %v %q code %d, want %v grpc %v", i, ev.Outcome, ev.Transport, ev.Code, w.outcome, w.code)
		}
	}
}

// TestOutsideServer calls the interceptor directly, with no server stream
// in the context: the replay still works, without metadata to send.
func TestOutsideServer(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	icpt := grpcidem.UnaryServerInterceptor(eng)
	info := &grpc.UnaryServerInfo{FullMethod: testpb.Orders_Create_FullMethodName}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcidem.KeyMetadata, "k"))
	var runs int
	handler := func(context.Context, any) (any, error) {
		runs++
		return &testpb.Order{Id: fmt.Sprint("ord_", runs)}, nil
	}
	first, err := icpt(ctx, order("book", 1), info, handler)
	if err != nil {
		t.Fatal(err)
	}
	second, err := icpt(ctx, order("book", 1), info, handler)
	if err != nil || !proto.Equal(first.(proto.Message), second.(*testpb.Order)) || runs != 1 {
		t.Fatalf("replay %v, %v after %d runs; want %v", second, err, runs, first)
	}
	if _, err := icpt(ctx, "not a message", info, handler); status.Code(err) != codes.Internal {
		t.Fatalf("a request that is not a proto.Message: %v, want Internal", err)
	}
}

func TestNilEngine(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	grpcidem.UnaryServerInterceptor(nil)
}

// TestUnregisteredReplyType: a reply of a method whose service is not
// registered, of a type not in protoregistry.GlobalTypes (a dynamic
// message), is stored, but its replay is refused as a corrupt record
// (Unavailable, the event naming the type) rather than a second run.
func TestUnregisteredReplyType(t *testing.T) {
	t.Parallel()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("unregistered.proto"), Package: proto.String("idem.grpcidem.unregistered"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Reply"), Field: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String("id"), JsonName: proto.String("id"), Number: proto.Int32(1),
			Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		}}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var last atomic.Value // of the last event's error
	eng, err := core.New(core.Config{Observer: func(ev core.Event) { last.Store(fmt.Sprint(ev.Err)) }})
	if err != nil {
		t.Fatal(err)
	}
	icpt := grpcidem.UnaryServerInterceptor(eng)
	info := &grpc.UnaryServerInfo{FullMethod: "/idem.grpcidem.unregistered.Svc/Get"}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcidem.KeyMetadata, "k"))
	var runs int
	handler := func(context.Context, any) (any, error) {
		runs++
		m := dynamicpb.NewMessage(fd.Messages().Get(0))
		m.Set(fd.Messages().Get(0).Fields().Get(0), protoreflect.ValueOfString("ord_1"))
		return m, nil
	}
	if _, err := icpt(ctx, order("book", 1), info, handler); err != nil {
		t.Fatal(err)
	}
	_, err = icpt(ctx, order("book", 1), info, handler)
	if status.Code(err) != codes.Unavailable || !strings.Contains(last.Load().(string), "idem.grpcidem.unregistered.Reply") || runs != 1 {
		t.Fatalf("replay: %v (event: %v) after %d runs; want Unavailable, the event naming the type, one run", err, last.Load(), runs)
	}
}

// TestReplayTypeMismatch: a stored OK reply whose message type is not the
// method's output type (a tampered or misfiled record) is never replayed:
// Unavailable, as a corrupt record is over HTTP (503), reported once as a
// store error and not as a replay, and the handler does not run.
func TestReplayTypeMismatch(t *testing.T) {
	t.Parallel()
	var events []core.Event
	eng, err := core.New(core.Config{Observer: func(ev core.Event) { events = append(events, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	method := testpb.Orders_Create_FullMethodName
	req := order("book", 1)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// The record of the same call, as the interceptor fingerprints it, but
	// holding a CreateRequest where the method answers an Order.
	l, _, err := eng.Acquire(&core.Call{Key: "k", Method: method, Route: method, Fingerprint: sha256.Sum256(append([]byte(method+"\x00"), b...))})
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v", err)
	}
	l.Complete(&core.Record{Code: int(codes.OK), Header: map[string][]string{":message": {"idem.grpcidem.testpb.CreateRequest"}}, Body: b})

	icpt := grpcidem.UnaryServerInterceptor(eng)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcidem.KeyMetadata, "k"))
	runs := 0
	events = nil
	resp, err := icpt(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		runs++
		return &testpb.Order{Id: "ord_1"}, nil
	})
	if status.Code(err) != codes.Unavailable || resp != nil || runs != 0 {
		t.Fatalf("replay of a CreateRequest for Create: %v, %v after %d runs; want Unavailable, no run", resp, err, runs)
	}
	if len(events) != 1 || events[0].Outcome != core.OutcomeStoreError || !errors.Is(events[0].Err, core.ErrCorruptRecord) ||
		events[0].Route != method || events[0].Code != int(codes.Unavailable) {
		t.Fatalf("events %+v, want one: the corrupt record, Unavailable", events)
	}

	// A handler that answers another type than its method's output is not
	// stored: a retry runs it again.
	ctx = metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcidem.KeyMetadata, "k2"))
	for range 2 {
		if _, err := icpt(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
			runs++
			return req, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if last := events[len(events)-1]; runs != 2 || last.Outcome != core.OutcomeNotStored {
		t.Fatalf("a reply of the wrong type: %d runs, last event %+v; want 2 runs, not stored", runs, last)
	}

	// The key of a completed Create sent to a method of another output type
	// is a key reused, not a corrupt record: the method joins the
	// fingerprint, compared before the stored reply's type.
	ctx = metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcidem.KeyMetadata, "k3"))
	if _, err := icpt(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		return &testpb.Order{Id: "ord_3"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = icpt(ctx, &healthpb.HealthCheckRequest{}, &grpc.UnaryServerInfo{FullMethod: healthpb.Health_Check_FullMethodName},
		func(context.Context, any) (any, error) { runs++; return &healthpb.HealthCheckResponse{}, nil })
	if status.Code(err) != codes.AlreadyExists || runs != 2 {
		t.Fatalf("Create's key sent to Health/Check: %v after %d runs; want AlreadyExists, no run", err, runs)
	}
}

// A new key of a scope over core.Config.Quota is ResourceExhausted with
// RetryInfo (the window's room, or Config.RetryAfter for keys in flight),
// reported as OutcomeQuota with that code; its replays still answer.
func TestQuota(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var quota []core.Event
	h := start(t, core.Config{Quota: core.Quota{InFlight: 1, PerWindow: 2, Window: time.Hour}, RetryAfter: 3 * time.Second,
		Observer: func(ev core.Event) {
			if ev.Outcome == core.OutcomeQuota {
				mu.Lock()
				quota = append(quota, ev)
				mu.Unlock()
			}
		}})
	retryOf := func(r result) time.Duration {
		for _, d := range status.Convert(r.err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				return ri.RetryDelay.AsDuration()
			}
		}
		return 0
	}
	h.svc.started, h.svc.hold = make(chan struct{}, 1), make(chan struct{})
	first := make(chan result, 1)
	go func() { first <- h.call(order("book", 1), key("k1")...) }()
	<-h.svc.started
	r := h.call(order("book", 1), key("k2")...)
	wantRefusal(t, r, codes.ResourceExhausted, grpcidem.ReasonQuotaExceeded, true)
	if d := retryOf(r); d != 3*time.Second {
		t.Fatalf("RetryInfo of a refusal in flight: %v, want Config.RetryAfter", d)
	}
	close(h.svc.hold)
	h.svc.started = nil
	done := <-first
	wantOK(t, done)
	wantOK(t, h.call(order("book", 1), key("k3")...))
	r = h.call(order("book", 1), key("k4")...)
	wantRefusal(t, r, codes.ResourceExhausted, grpcidem.ReasonQuotaExceeded, true)
	if d := retryOf(r); d <= 59*time.Minute || d > time.Hour {
		t.Fatalf("RetryInfo of a full window: %v, want about an hour", d)
	}
	wantReplayOf(t, h.call(order("book", 1), key("k1")...), done)
	h.wantRuns(2)
	mu.Lock()
	defer mu.Unlock()
	if len(quota) != 2 || codes.Code(quota[0].Code) != codes.ResourceExhausted || quota[0].Transport != "grpc" {
		t.Fatalf("quota events %+v", quota)
	}
}
