package grpcidem_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/grpcidem/internal/testpb"
)

// flaky answers the first calls with its errors, then with an order, and
// keeps the key metadata of every call: "key|legacy key".
type flaky struct {
	testpb.UnimplementedOrdersServer
	mu    sync.Mutex
	fails []error
	keys  []string
}

func (f *flaky) Create(ctx context.Context, _ *testpb.CreateRequest) (*testpb.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, strings.Join(metadata.ValueFromIncomingContext(ctx, grpcidem.KeyMetadata), ",")+"|"+
		strings.Join(metadata.ValueFromIncomingContext(ctx, grpcidem.LegacyKeyMetadata), ","))
	if n := len(f.keys); n <= len(f.fails) {
		return nil, f.fails[n-1]
	}
	return &testpb.Order{Id: "ord_1"}, nil
}

// clock is the client's time in tests: now moves by the waits only.
type clock struct {
	mu      sync.Mutex
	start   time.Time
	waits   []time.Duration
	onSleep func(n int) // if not nil, called on the n-th wait (from 1)
}

func newClock() *clock { return &clock{start: time.Now()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.start
	for _, w := range c.waits {
		t = t.Add(w)
	}
	return t
}

func (c *clock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	n := len(c.waits)
	c.mu.Unlock()
	if c.onSleep != nil {
		c.onSleep(n)
	}
	return ctx.Err()
}

func (c *clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.waits)
}

// noJitter makes the ±25 % jitter zero.
func noJitter(n int64) int64 { return n / 2 }

func (c *clock) option(randN func(int64) int64) grpcidem.Option {
	return grpcidem.WithTestTime(c.now, c.sleep, randN)
}

// dial connects to a loopback server of svc (through the server
// interceptors) with the client interceptor of opts.
func dial(t *testing.T, svc testpb.OrdersServer, server []grpc.UnaryServerInterceptor, opts ...grpcidem.Option) testpb.OrdersClient {
	conn := serve(t, svc, server...)
	// A second connection to the same server, with the client interceptor.
	cc, err := grpc.NewClient(conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(opts...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewOrdersClient(cc)
}

func retryErr(code codes.Code, delay time.Duration) error {
	st, _ := status.New(code, "try again").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	return st.Err()
}

func ms(n ...int) []time.Duration {
	d := make([]time.Duration, len(n))
	for i, v := range n {
		d[i] = time.Duration(v) * time.Millisecond
	}
	return d
}

func TestClientRetries(t *testing.T) {
	t.Parallel()
	unavailable := status.Error(codes.Unavailable, "down")
	tests := []struct {
		name     string
		fails    []error
		opts     []grpcidem.Option
		wantCode codes.Code
		wantRuns int
		waits    []time.Duration
	}{
		{"unavailable until success", []error{unavailable, unavailable, unavailable}, nil, codes.OK, 4, ms(100, 200, 400)},
		{"aborted with RetryInfo", []error{retryErr(codes.Aborted, 2*time.Second)}, nil, codes.OK, 2, ms(2000)},
		{"RetryInfo shorter than backoff", []error{retryErr(codes.Aborted, time.Millisecond)}, nil, codes.OK, 2, ms(100)},
		{"RetryInfo capped", []error{retryErr(codes.Unavailable, time.Minute)}, nil, codes.OK, 2, ms(5000)},
		{"gives up", []error{unavailable, unavailable, unavailable, unavailable, unavailable}, nil, codes.Unavailable, 4, ms(100, 200, 400)},
		{"max attempts", []error{unavailable, unavailable}, []grpcidem.Option{grpcidem.WithMaxAttempts(2)}, codes.Unavailable, 2, ms(100)},
		{"no retry", []error{unavailable}, []grpcidem.Option{grpcidem.WithMaxAttempts(0)}, codes.Unavailable, 1, nil},
		{"backoff", []error{unavailable, unavailable, unavailable},
			[]grpcidem.Option{grpcidem.WithBackoff(10*time.Millisecond, 30*time.Millisecond)}, codes.OK, 4, ms(10, 20, 30)},
		{"backoff of zeros: the defaults", []error{unavailable, retryErr(codes.Aborted, 2*time.Second)},
			[]grpcidem.Option{grpcidem.WithBackoff(0, 0)}, codes.OK, 3, ms(100, 2000)},
		{"invalid argument not retried", []error{status.Error(codes.InvalidArgument, "bad")}, nil, codes.InvalidArgument, 1, nil},
		{"already exists not retried", []error{status.Error(codes.AlreadyExists, "reused")}, nil, codes.AlreadyExists, 1, nil},
		{"internal not retried", []error{status.Error(codes.Internal, "bug")}, nil, codes.Internal, 1, nil},
		{"resource exhausted not retried", []error{status.Error(codes.ResourceExhausted, "slow down")}, nil, codes.ResourceExhausted, 1, nil},
		{"quota exceeded with RetryInfo", []error{retryErr(codes.ResourceExhausted, time.Second)}, nil, codes.OK, 2, ms(1000)},
		{"quota exceeded for a minute", []error{retryErr(codes.ResourceExhausted, time.Minute)}, nil, codes.ResourceExhausted, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, c := &flaky{fails: tt.fails}, newClock()
			client := dial(t, f, nil, append(tt.opts, c.option(noJitter))...)
			_, err := client.Create(context.Background(), order("book", 1))
			if status.Code(err) != tt.wantCode {
				t.Fatalf("error %v, want code %s", err, tt.wantCode)
			}
			if len(f.keys) != tt.wantRuns {
				t.Fatalf("%d calls, want %d", len(f.keys), tt.wantRuns)
			}
			k, _, _ := strings.Cut(f.keys[0], "|")
			if u, err := uuid.Parse(k); err != nil || u.Version() != 4 {
				t.Fatalf("key %q, want a UUIDv4", k)
			}
			for i, got := range f.keys {
				if got != f.keys[0] {
					t.Fatalf("call %d had keys %q, the first %q: want one key", i, got, f.keys[0])
				}
			}
			if got := c.Waits(); !slices.Equal(got, tt.waits) {
				t.Fatalf("waits %v, want %v", got, tt.waits)
			}
		})
	}
}

func TestClientKeys(t *testing.T) {
	t.Parallel()
	unavailable := status.Error(codes.Unavailable, "down")
	tests := []struct {
		name  string
		md    []string
		opts  []grpcidem.Option
		want  string // "key|legacy" of every call
		calls int
	}{
		{"own key kept", []string{grpcidem.KeyMetadata, "mine"}, nil, "mine|", 2},
		{"legacy key kept", []string{grpcidem.LegacyKeyMetadata, "old"}, nil, "|old", 2},
		{"skipped", nil, []grpcidem.Option{grpcidem.WithSkip(func(_ context.Context, m string) bool {
			return m == testpb.Orders_Create_FullMethodName
		})}, "|", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, c := &flaky{fails: []error{unavailable}}, newClock()
			client := dial(t, f, nil, append(tt.opts, c.option(noJitter))...)
			client.Create(metadata.AppendToOutgoingContext(context.Background(), tt.md...), order("book", 1)) //nolint:errcheck
			if len(f.keys) != tt.calls {
				t.Fatalf("%d calls, want %d", len(f.keys), tt.calls)
			}
			for _, got := range f.keys {
				if got != tt.want {
					t.Fatalf("keys %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func TestClientJitter(t *testing.T) {
	t.Parallel()
	unavailable := status.Error(codes.Unavailable, "down")
	for name, tt := range map[string]struct {
		randN func(int64) int64
		want  []time.Duration
	}{
		"low":  {func(int64) int64 { return 0 }, ms(75, 150, 300)},
		"high": {func(n int64) int64 { return n - 1 }, ms(125, 250, 500)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newClock()
			client := dial(t, &flaky{fails: []error{unavailable, unavailable, unavailable}}, nil, c.option(tt.randN))
			if _, err := client.Create(context.Background(), order("book", 1)); err != nil {
				t.Fatal(err)
			}
			if got := c.Waits(); !slices.Equal(got, tt.want) {
				t.Fatalf("waits %v, want %v", got, tt.want)
			}
		})
	}
}

// TestClientDeadline: the next wait would end after the call's deadline,
// so the last error is returned at once.
func TestClientDeadline(t *testing.T) {
	t.Parallel()
	unavailable := status.Error(codes.Unavailable, "down")
	f := &flaky{fails: slices.Repeat([]error{unavailable}, 10)}
	deadline := time.Now().Add(time.Hour)
	c := &clock{start: deadline.Add(-500 * time.Millisecond)} // 500 ms left on the client's clock
	client := dial(t, f, nil, grpcidem.WithMaxAttempts(10), c.option(noJitter))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if _, err := client.Create(ctx, order("book", 1)); status.Code(err) != codes.Unavailable {
		t.Fatalf("error %v, want the last Unavailable", err)
	}
	if got, want := c.Waits(), ms(100, 200); !slices.Equal(got, want) || len(f.keys) != 3 {
		t.Fatalf("%d calls, waits %v; want 3 calls, waits %v (400 ms more would pass the deadline)", len(f.keys), got, want)
	}
}

func TestClientCanceledWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClock()
	c.onSleep = func(int) { cancel() }
	client := dial(t, &flaky{fails: []error{status.Error(codes.Unavailable, "down")}}, nil, c.option(noJitter))
	if _, err := client.Create(ctx, order("book", 1)); status.Code(err) != codes.Canceled {
		t.Fatalf("error %v, want Canceled", err)
	}
}

// TestClientWithServer drives the idem server through the client: the
// first reply is lost after the handler ran, and the retry with the same
// key gets the replay.
func TestClientWithServer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		keyHeader string
		opts      []grpcidem.Option
	}{
		{"default", "", nil},
		// A server whose KeyHeader is another name reads the key there.
		{"own key header", "X-Request-Key", []grpcidem.Option{grpcidem.WithKeyMetadata("X-Request-Key")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eng, err := core.New(core.Config{KeyHeader: tt.keyHeader})
			if err != nil {
				t.Fatal(err)
			}
			svc := &service{}
			var calls int
			var mu sync.Mutex
			loseFirst := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				mu.Lock()
				calls++
				first := calls == 1
				mu.Unlock()
				resp, err := handler(ctx, req)
				if first {
					return nil, status.Error(codes.Unavailable, "connection lost")
				}
				return resp, err
			}
			c := newClock()
			client := dial(t, svc, []grpc.UnaryServerInterceptor{loseFirst, grpcidem.UnaryServerInterceptor(eng)},
				append(tt.opts, c.option(noJitter))...)
			var header metadata.MD
			reply, err := client.Create(context.Background(), order("book", 1), grpc.Header(&header))
			if err != nil || reply.Id != "ord_1" || !grpcidem.Replayed(header) {
				t.Fatalf("reply %v, header %v, err %v; want the replay of ord_1", reply, header, err)
			}
			if runs := svc.runs.Load(); runs != 1 || calls != 2 {
				t.Fatalf("handler ran %d times in %d calls, want once in 2", runs, calls)
			}
		})
	}
}

// TestClientWithServerInFlight: the first call's handler still runs when
// the retry comes, which gets Aborted with the server's RetryInfo; the
// client waits that long (the first call ends meanwhile) and gets the
// replay.
func TestClientWithServerInFlight(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{RetryAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{started: make(chan struct{}, 1), hold: make(chan struct{})}
	firstDone := make(chan struct{})
	var calls int
	var mu sync.Mutex
	// The first call goes on in the background, as if its connection had
	// dropped while the handler ran.
	dropFirst := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if !first {
			return handler(ctx, req)
		}
		go func() {
			defer close(firstDone)
			handler(context.WithoutCancel(ctx), req) //nolint:errcheck
		}()
		<-svc.started
		return nil, status.Error(codes.Unavailable, "connection lost")
	}
	c := newClock()
	c.onSleep = func(n int) {
		if n == 2 { // after the Aborted: let the first call finish
			close(svc.hold)
			<-firstDone
		}
	}
	client := dial(t, svc, []grpc.UnaryServerInterceptor{dropFirst, grpcidem.UnaryServerInterceptor(eng)}, c.option(noJitter))
	var header metadata.MD
	reply, err := client.Create(context.Background(), order("book", 1), grpc.Header(&header))
	if err != nil || reply.Id != "ord_1" || !grpcidem.Replayed(header) {
		t.Fatalf("reply %v, header %v, err %v; want the replay of ord_1", reply, header, err)
	}
	if got, want := c.Waits(), ms(100, 2000); !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v (the backoff, then the server's RetryInfo)", got, want)
	}
	if runs := svc.runs.Load(); runs != 1 || calls != 3 {
		t.Fatalf("handler ran %d times in %d calls, want once in 3", runs, calls)
	}
}
