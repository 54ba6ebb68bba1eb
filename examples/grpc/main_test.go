package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	ordersv1 "github.com/idem-go/idem/examples/grpc/proto/idem/examples/orders/v1"
	"github.com/idem-go/idem/grpcidem"
)

// The tests build the example and drive the binary from outside, as a
// client would, with a real gRPC client on a loopback port.

var bin string // the example's binary, built by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-grpc-example")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "grpc-example")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// instance is a running example process.
type instance struct {
	t      *testing.T
	addr   string
	client ordersv1.OrdersClient
	conn   *grpc.ClientConn
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// start runs the example on a port of its choosing (ADDR=127.0.0.1:0),
// with the extra environment, and stops it when the test ends.
func start(t *testing.T, env ...string) *instance {
	t.Helper()
	return launch(t, env...)()
}

// launch starts the example as start does and returns a function that
// waits until it listens: instances launched one after the other start
// together.
func launch(t *testing.T, env ...string) func() *instance {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "ADDR=127.0.0.1:0"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs bytes.Buffer
	addrc := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		<-done
		cmd.Wait() //nolint:errcheck
		if t.Failed() {
			mu.Lock()
			t.Logf("example log:\n%s", logs.String())
			mu.Unlock()
		}
	})
	return func() *instance {
		t.Helper()
		return connect(t, addrc, done)
	}
}

// connect waits for the address an example listens on and dials it.
func connect(t *testing.T, addrc <-chan string, done <-chan struct{}) *instance {
	t.Helper()
	var in instance
	select {
	case in.addr = <-addrc:
	case <-done:
		t.Fatal("the example exited before it listened")
	case <-time.After(30 * time.Second):
		t.Fatal("the example did not listen within 30s")
	}
	in.t = t
	var err error
	in.conn, err = grpc.NewClient(in.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.conn.Close() })
	in.client = ordersv1.NewOrdersClient(in.conn)
	return &in
}

type result struct {
	order  *ordersv1.Order
	err    error
	header metadata.MD
}

// create calls CreateOrder as user with key ("" for none).
func (in *instance) create(user, key string, req *ordersv1.CreateOrderRequest) result {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-user-id", user)
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, grpcidem.KeyMetadata, key)
	}
	var r result
	r.order, r.err = in.client.CreateOrder(ctx, req, grpc.Header(&r.header))
	return r
}

func (in *instance) count() int32 {
	in.t.Helper()
	l, err := in.client.ListOrders(context.Background(), &ordersv1.ListOrdersRequest{})
	if err != nil {
		in.t.Fatal(err)
	}
	return l.Count
}

func newKey() string { return rand.Text() }

func req(item string, qty int32) *ordersv1.CreateOrderRequest {
	return &ordersv1.CreateOrderRequest{Item: item, Qty: qty}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	in := start(t)
	k := newKey()
	first := in.create("alice", k, req("book", 2))
	if first.err != nil || first.order.Item != "book" || first.order.Qty != 2 || grpcidem.Replayed(first.header) {
		t.Fatalf("first call: %v, %v, header %v", first.order, first.err, first.header)
	}
	second := in.create("alice", k, req("book", 2))
	if second.err != nil || !proto.Equal(second.order, first.order) || !grpcidem.Replayed(second.header) {
		t.Fatalf("second call: %v, %v, header %v; want the replay of %v", second.order, second.err, second.header, first.order)
	}
	if loc := second.header.Get("location"); len(loc) != 1 || loc[0] != "/orders/"+first.order.Id {
		t.Fatalf("replayed location %v", loc)
	}
	if r := in.create("alice", k, req("book", 3)); status.Code(r.err) != codes.AlreadyExists {
		t.Fatalf("same key, other order: %v, want AlreadyExists", r.err)
	}
	// Another user's key is another key.
	if r := in.create("bob", k, req("book", 2)); r.err != nil || r.order.Id == first.order.Id {
		t.Fatalf("bob's call: %v, %v; want an order of his own", r.order, r.err)
	}
	if n := in.count(); n != 2 {
		t.Fatalf("%d orders, want 2", n)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	in := start(t)
	for _, tt := range []struct {
		req    *ordersv1.CreateOrderRequest
		code   codes.Code
		stored bool
	}{
		{req("book", 0), codes.InvalidArgument, true},
		{req("", 1), codes.InvalidArgument, true},
		{req("a\x00b", 1), codes.InvalidArgument, true},
		{req("book", 1_000_001), codes.InvalidArgument, true},
		{req("boom", 1), codes.Internal, false},
	} {
		k := newKey()
		first, second := in.create("alice", k, tt.req), in.create("alice", k, tt.req)
		if status.Code(first.err) != tt.code || status.Code(second.err) != tt.code {
			t.Fatalf("%v: %v then %v, want %s", tt.req, first.err, second.err, tt.code)
		}
		if grpcidem.Replayed(first.header) || grpcidem.Replayed(second.header) != tt.stored {
			t.Fatalf("%v: second call replayed %v, want %v", tt.req, grpcidem.Replayed(second.header), tt.stored)
		}
	}
	if n := in.count(); n != 0 {
		t.Fatalf("%d orders, want none", n)
	}
}

func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	in := start(t)
	k := newKey()
	const n = 50
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = in.create("alice", k, &ordersv1.CreateOrderRequest{Item: "lamp", Qty: 1, DelayMs: 100})
		}()
	}
	wg.Wait()
	var ids []string
	for _, r := range results {
		switch status.Code(r.err) {
		case codes.OK:
			ids = append(ids, r.order.Id)
		case codes.Aborted:
		default:
			t.Fatalf("call: %v, want an order or Aborted (in flight)", r.err)
		}
	}
	if len(ids) == 0 || ids[0] != ids[len(ids)-1] {
		t.Fatalf("orders %v, want one", ids)
	}
	if got := in.count(); got != 1 {
		t.Fatalf("%d orders created, want 1", got)
	}
}

func TestReflection(t *testing.T) {
	t.Parallel()
	in := start(t)
	stream, err := reflectionpb.NewServerReflectionClient(in.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetListServicesResponse().GetService() {
		if s.Name == ordersv1.Orders_ServiceDesc.ServiceName {
			return
		}
	}
	t.Fatalf("services %v, want %s", resp.GetListServicesResponse().GetService(), ordersv1.Orders_ServiceDesc.ServiceName)
}

// With IDEM_QUOTA_PER_MINUTE=2, a user's third new key within a minute is
// refused with ResourceExhausted and a RetryInfo, while the user's completed
// keys replay and another user's key runs.
func TestQuota(t *testing.T) {
	t.Parallel()
	in := start(t, "IDEM_QUOTA_PER_MINUTE=2")
	done := newKey()
	if r := in.create("alice", done, req("book", 1)); r.err != nil {
		t.Fatal(r.err)
	}
	if r := in.create("alice", newKey(), req("book", 1)); r.err != nil {
		t.Fatal(r.err)
	}
	r := in.create("alice", newKey(), req("book", 1))
	st := status.Convert(r.err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third new key: %v, want ResourceExhausted", r.err)
	}
	var retry bool
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
			retry = true
		}
	}
	if !retry {
		t.Fatalf("refusal %v without a RetryInfo", st.Details())
	}
	if r := in.create("alice", done, req("book", 1)); r.err != nil || !grpcidem.Replayed(r.header) {
		t.Fatalf("completed key over the quota: %v, replayed %v; want its replay", r.err, grpcidem.Replayed(r.header))
	}
	if r := in.create("bob", newKey(), req("book", 1)); r.err != nil {
		t.Fatalf("another user: %v", r.err)
	}
	if n := in.count(); n != 3 {
		t.Fatalf("%d orders, want 3", n)
	}
}
