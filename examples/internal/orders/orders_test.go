package orders

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Decode refuses with ErrInvalid what the service could not store: a NUL in
// item (PostgreSQL's text refuses it) and a qty outside 1..MaxQty (an
// integer column); the message says which field.
func TestDecode(t *testing.T) {
	for body, want := range map[string]string{
		`{"item": "book", "qty": 2}`:                         "",
		fmt.Sprintf(`{"item": "book", "qty": %d}`, MaxQty):   "",
		`{"item": "book", "qty": 0}`:                         "qty must be positive",
		`{"item": "book", "qty": -1}`:                        "qty must be positive",
		fmt.Sprintf(`{"item": "book", "qty": %d}`, MaxQty+1): "qty must be at most",
		`{"item": "book", "qty": 99999999999}`:               "qty must be at most",
		`{"item": "book", "qty": 99999999999999999999}`:      "invalid order: json",
		`{"item": "a\u0000b", "qty": 1}`:                     "item must not contain NUL",
		`{"item": "", "qty": 1}`:                             "item is required",
		`{"item": `:                                          "invalid order",
	} {
		_, err := Decode([]byte(body))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", body, err)
		case want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want ErrInvalid saying %q", body, err, want)
		}
	}
}

// ServerError logs the error and gives the client a fixed message; the
// simulated failure keeps its own.
func TestServerError(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	leak := errors.New(`ERROR: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)`)
	if got := ServerError(log, fmt.Errorf("insert: %w", leak)); got != InternalError {
		t.Errorf("ServerError = %q, want %q", got, InternalError)
	}
	if !strings.Contains(logs.String(), "SQLSTATE 22021") {
		t.Errorf("the error is not logged: %s", logs.String())
	}
	if got := ServerError(log, ErrBoom); got != ErrBoom.Error() {
		t.Errorf("ServerError(ErrBoom) = %q", got)
	}
}

// Create finishes the order's write once it has begun, whatever happens to
// the request's context: a client that hangs up then must not turn an order
// that was written into an error, which would release the key for a retry
// that writes it again.
func TestCreateNotCutOff(t *testing.T) {
	cmds := fakeRedis(t)
	s := NewService(redis.NewClient(&redis.Options{Addr: cmds.addr, MaxRetries: -1}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client has gone
	o, err := s.Create(ctx, CreateRequest{Item: "lamp", Qty: 1})
	if err != nil || o.ID != "ord_1" {
		t.Fatalf("Create with a canceled context: %+v, %v; want ord_1 written", o, err)
	}
	got := slices.DeleteFunc(cmds.names(), func(c string) bool { return c == "HELLO" || c == "CLIENT" })
	if !slices.Equal(got, []string{"INCR", "RPUSH"}) {
		t.Errorf("Redis got %q, want INCR and RPUSH", got)
	}
}

// fakeRedisServer answers INCR and RPUSH with 1 on a loopback port (and
// go-redis's HELLO with an error: RESP2), and remembers the commands it got.
type fakeRedisServer struct {
	addr string
	mu   sync.Mutex
	cmds []string
}

func (f *fakeRedisServer) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cmds)
}

func fakeRedis(t *testing.T) *fakeRedisServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &fakeRedisServer{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return f
}

// serve reads commands (RESP arrays of bulk strings) from c and answers
// each: :1 for INCR and RPUSH, an error for anything else.
func (f *fakeRedisServer) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		var n int
		if _, err := fmt.Fscanf(r, "*%d\r\n", &n); err != nil {
			return
		}
		var args []string
		for range n {
			var size int
			if _, err := fmt.Fscanf(r, "$%d\r\n", &size); err != nil {
				return
			}
			b := make([]byte, size+2)
			if _, err := io.ReadFull(r, b); err != nil {
				return
			}
			args = append(args, string(b[:size]))
		}
		cmd := strings.ToUpper(args[0])
		f.mu.Lock()
		f.cmds = append(f.cmds, cmd)
		f.mu.Unlock()
		reply := "-ERR unknown command\r\n"
		if cmd == "INCR" || cmd == "RPUSH" {
			reply = ":1\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}
