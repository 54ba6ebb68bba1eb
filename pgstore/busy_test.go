package pgstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
)

// TestTxBeginBusy: a server that gives no connection before the deadline
// (a burst on a pool still opening its connections; here a server that
// never answers) or is out of connection slots (SQLSTATE 53300) makes
// Begin busy, which the Engine refuses even when it fails open; a server
// that refuses connections is down: an error that is not busy.
func TestTxBeginBusy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		serve func(net.Conn) // nil: nothing listens
		busy  bool
	}{
		{"never answers", func(c net.Conn) { io.Copy(io.Discard, c) }, true}, //nolint:errcheck // until the client hangs up
		{"too many connections", tooManyConnections, true},
		{"refuses connections", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := fakeServer(t, tc.serve)
			pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/test?sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			store, err := pgstore.NewTx(pool, &pgstore.Options{JanitorInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, tx, err := store.Begin(ctx, "k", 10*time.Second)
			if tx != nil || err == nil {
				t.Fatalf("Begin = %v, %v; want an error", tx, err)
			}
			if got := errors.Is(err, core.ErrStoreBusy); got != tc.busy {
				t.Fatalf("Begin: %v; busy = %v, want %v", err, got, tc.busy)
			}
		})
	}
}

// fakeServer listens on a loopback port and runs serve on each connection
// until the test ends; with serve nil, the port is closed: connections to
// it are refused.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if serve == nil {
		l.Close()
		return l.Addr().String()
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go serve(c)
		}
	}()
	return l.Addr().String()
}

// tooManyConnections reads a startup message and answers as a PostgreSQL
// at max_connections does.
func tooManyConnections(c net.Conn) {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(n[:]))-4); err != nil {
		return
	}
	fields := "SFATAL\x00VFATAL\x00C53300\x00Msorry, too many clients already\x00\x00"
	msg := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(4+len(fields)))
	c.Write(append(msg, fields...)) //nolint:errcheck // the client reads it or not
}
