package redislock

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A dial refused while Redis restarts is tried again until the server
// listens, within the dial's deadline.
func TestRedialUntilListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused until it listens again
	var attempts atomic.Int32
	refused := make(chan struct{})
	dial := redial(func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if attempts.Add(1) == 2 {
			close(refused)
		}
		return conn, err
	})
	go func() {
		<-refused // refused twice: now start listening
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { l.Close() })
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial after the server came back: %v (%d attempts)", err, attempts.Load())
	}
	conn.Close()
	if attempts.Load() < 3 {
		t.Fatalf("%d attempts, want the refusals dialled again", attempts.Load())
	}
}

func TestRedialGivesUp(t *testing.T) {
	refused := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	other := errors.New("no such host")
	for _, tt := range []struct {
		err      error
		attempts int32
	}{{refused, 3}, {other, 1}} {
		var attempts atomic.Int32
		ctx, cancel := context.WithCancel(context.Background())
		dial := redial(func(context.Context, string, string) (net.Conn, error) {
			if attempts.Add(1) == 3 {
				cancel() // the caller's deadline: the dial returns the refusal
			}
			return nil, tt.err
		})
		_, err := dial(ctx, "tcp", "127.0.0.1:1")
		cancel()
		if !errors.Is(err, tt.err) || attempts.Load() != tt.attempts {
			t.Fatalf("%v: err %v after %d attempts, want it after %d", tt.err, err, attempts.Load(), tt.attempts)
		}
	}
}
