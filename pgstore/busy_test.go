package pgstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
)

// TestTxBeginBusy: PostgreSQL out of connection slots (SQLSTATE 53300), or
// giving no connection before the deadline to a request that waited for a
// key's connection first (a burst), is busy, which the Engine refuses even
// when it fails open; a server that refuses connections, or never answers
// a request that found room (a new connection, or an idle one that the
// pool pings while the other is held), is down: an error that is not
// busy, and the tiered store falls back to the fast tier's lock.
func TestTxBeginBusy(t *testing.T) {
	t.Parallel()
	silent := func(c net.Conn) { io.Copy(io.Discard, c) } //nolint:errcheck // until the client hangs up
	for _, tc := range []struct {
		name   string
		serve  func(net.Conn) // nil: nothing listens
		queued bool           // another Begin holds the only key's connection first
		idle   bool           // the pool holds one connection and has the other idle, pinged when acquired
		busy   bool
	}{
		{name: "never answers", serve: silent},
		{name: "never answers, after waiting for a key's connection", serve: silent, queued: true, busy: true},
		{name: "stops answering, on an idle connection", serve: silentAfterStartup, idle: true},
		{name: "too many connections", serve: tooManyConnections, busy: true},
		{name: "refuses connections"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := fakeServer(t, tc.serve)
			pc, err := pgxpool.ParseConfig("postgres://postgres@" + addr + "/test?sslmode=disable&pool_max_conns=2") // one key at once
			if err != nil {
				t.Fatal(err)
			}
			var ping atomic.Bool // as pgxpool does for a connection idle over a second
			pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return ping.Load() }
			pool, err := pgxpool.NewWithConfig(context.Background(), pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if tc.idle {
				held, err := pool.Acquire(context.Background()) // a running request's, hung
				if err != nil {
					t.Fatal(err)
				}
				idle, err := pool.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				idle.Release()
				t.Cleanup(held.Release)
				ping.Store(true)
			}
			store, err := pgstore.NewTx(pool, &pgstore.Options{JanitorInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			timeout := 300 * time.Millisecond
			if tc.queued {
				first := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					_, _, err := store.Begin(ctx, "first", 10*time.Second)
					first <- err
				}()
				for pool.Stat().ConstructingConns() == 0 { // the first holds the key's connection
					time.Sleep(time.Millisecond)
				}
				t.Cleanup(func() { <-first })
				timeout = 600 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, tx, err := store.Begin(ctx, "k", 10*time.Second)
			if tx != nil || err == nil {
				t.Fatalf("Begin = %v, %v; want an error", tx, err)
			}
			if got := errors.Is(err, core.ErrStoreBusy); got != tc.busy {
				t.Fatalf("Begin: %v; busy = %v, want %v", err, got, tc.busy)
			}
			if tc.busy || tc.queued || tc.idle {
				return
			}
			// Down: the tiered store holds the key by the fast tier's lock.
			eng, err := core.New(core.Config{Store: core.NewTiered(core.NewMemoryStore(0), store), StoreTimeout: 300 * time.Millisecond,
				Observer: func(core.Event) {}})
			if err != nil {
				t.Fatal(err)
			}
			l, _, err := eng.Acquire(&core.Call{Key: "k"})
			if l == nil || !l.Protected() {
				t.Fatalf("tiered Acquire: %v, %v; want a protected lease (the fast tier's lock)", l, err)
			}
			l.Release(0, nil)
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

// silentAfterStartup completes the startup of a connection, then never
// answers again.
func silentAfterStartup(c net.Conn) {
	if !readStartup(c) {
		return
	}
	var msg []byte
	msg = append(msg, 'R', 0, 0, 0, 8, 0, 0, 0, 0)              // AuthenticationOk
	msg = append(msg, 'K', 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 2) // BackendKeyData
	msg = append(msg, 'Z', 0, 0, 0, 5, 'I')                     // ReadyForQuery
	c.Write(msg)                                                //nolint:errcheck // the client reads it or not
	io.Copy(io.Discard, c)                                      //nolint:errcheck // until the client hangs up
}

// readStartup reads a startup message.
func readStartup(c net.Conn) bool {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return false
	}
	_, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(n[:]))-4)
	return err == nil
}

// tooManyConnections reads a startup message and answers as a PostgreSQL
// at max_connections does.
func tooManyConnections(c net.Conn) {
	if !readStartup(c) {
		return
	}
	fields := "SFATAL\x00VFATAL\x00C53300\x00Msorry, too many clients already\x00\x00"
	msg := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(4+len(fields)))
	c.Write(append(msg, fields...)) //nolint:errcheck // the client reads it or not
}
