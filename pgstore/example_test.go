package pgstore_test

import (
	"context"
	"fmt"
	"io/fs"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
)

// An API protected by idem on PostgreSQL: the table migrated at start,
// the janitor stopped with the store.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	migrateCtx, cancel := context.WithTimeout(ctx, time.Minute) // it retries while running handlers hold the table
	defer cancel()
	if err := pgstore.Migrate(migrateCtx, pool, nil); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}

// The SQL that Migrate runs, for teams that run their own migration tool.
func ExampleMigrations() {
	names, _ := fs.Glob(pgstore.Migrations, "migrations/*.sql")
	for _, name := range names {
		fmt.Println(name)
	}
	// Output:
	// migrations/0001_init.down.sql
	// migrations/0001_init.up.sql
	// migrations/0002_steps.down.sql
	// migrations/0002_steps.up.sql
	// migrations/0003_quota.down.sql
	// migrations/0003_quota.up.sql
	// migrations/0004_quota_window.down.sql
	// migrations/0004_quota_window.up.sql
}

// A consumer applies each event once: the balance's update and the
// event's mark commit together, or neither does.
func ExampleInbox_Process() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.MigrateInbox(ctx, pool, nil); err != nil {
		log.Fatal(err)
	}
	inbox, err := pgstore.NewInbox(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	applied, err := inbox.Process(ctx, "event-42", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE account = $2", 100, "alice")
		return err
	})
	if err != nil {
		log.Fatal(err) // rolled back: a redelivery applies it
	}
	fmt.Println("applied now:", applied) // false: applied before
}
