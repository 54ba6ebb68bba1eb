// Command testserver is an API instance for pgstore's multi-process
// integration test: POST /orders behind core.Engine.Middleware on the
// PostgreSQL store, whose handler inserts a row into <schema>.side_effects
// (its side effect) and answers with the row's id. Several of them share
// one database.
//
//	testserver -database postgres://postgres@127.0.0.1:5432/test -schema idemtest_abc
//
// The schema must hold the store's table (pgstore.Migrate) and
// side_effects(id bigserial, key text). It prints "listening on <addr>"
// once it accepts connections, and stops on SIGTERM or SIGINT.
//
// With -tx the store is transactional (pgstore.NewTx) and the handler
// inserts through the request's transaction. A request with the header
// X-Crash kills the process with SIGKILL at that point of its handling:
// "insert" (after the handler's insert), "respond" (after the handler
// wrote its response, before the commit) or "commit" (as the COMMIT
// statement starts).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	dbURL := flag.String("database", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	schema := flag.String("schema", "", "schema of the store's table and of side_effects")
	delay := flag.Duration("delay", 20*time.Millisecond, "handler duration, so that duplicates overlap")
	name := flag.String("name", "", "instance name, in every response")
	transactional := flag.Bool("tx", false, "transactional mode")
	storeTimeout := flag.Duration("store-timeout", 0, "Config.StoreTimeout (0: its default); a burst on a busy machine needs more")
	flag.Parse()

	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(*dbURL)
	if err != nil {
		log.Fatal(err)
	}
	pc.ConnConfig.Tracer = crashTracer{}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var store core.Store
	if *transactional {
		s, err := pgstore.NewTx(pool, &pgstore.Options{Schema: *schema})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		store = s
	} else {
		s, err := pgstore.New(pool, &pgstore.Options{Schema: *schema})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		store = s
	}
	eng, err := core.New(core.Config{
		Store:        store,
		StoreTimeout: *storeTimeout,
		FailClosed:   true, // a store error must not run the handler unprotected here
		Observer: func(ev core.Event) {
			if ev.Outcome == core.OutcomeStoreError || ev.Outcome == core.OutcomeLockLost {
				log.Printf("%s: %v", ev.Outcome, ev.Err)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	insert := "INSERT INTO " + pgx.Identifier{*schema, "side_effects"}.Sanitize() + " (key) VALUES ($1) RETURNING id"
	mux := http.NewServeMux()
	mux.Handle("POST /orders", crashPoints(eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		var db interface {
			QueryRow(context.Context, string, ...any) pgx.Row
		} = pool
		if tx := pgstore.Tx(r.Context()); tx != nil {
			db = tx
		}
		var id int64
		if err := db.QueryRow(r.Context(), insert, key).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		crash(r.Context(), "insert")
		time.Sleep(*delay)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"id":%d,"server":%q,"at":%d}`, key, id, *name, time.Now().UnixNano())
		crash(r.Context(), "respond")
	}))))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-sig.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	fmt.Println("listening on", ln.Addr())
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-stopped
}

type crashKey struct{}

// crashPoints puts the request's X-Crash header in its context.
func crashPoints(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if at := r.Header.Get("X-Crash"); at != "" {
			r = r.WithContext(context.WithValue(r.Context(), crashKey{}, at))
		}
		next.ServeHTTP(w, r)
	})
}

// crash kills the process if ctx's request asked to crash at point.
func crash(ctx context.Context, point string) {
	if ctx.Value(crashKey{}) == point {
		syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck
		select {}
	}
}

// crashTracer crashes at "commit" as the COMMIT statement starts: the store
// calls carry the request's context values.
type crashTracer struct{}

func (crashTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL == "commit" {
		crash(ctx, "commit")
	}
	return ctx
}

func (crashTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
