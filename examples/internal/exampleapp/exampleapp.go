// Package exampleapp is the set-up the example servers share: the address,
// the store (memory; Redis when REDIS_URL is set; PostgreSQL when
// DATABASE_URL is set; Redis in front of PostgreSQL when both are), the idem
// Engine scoped per user (fail-open, or fail-closed with IDEM_FAIL_CLOSED=1;
// none with IDEM_OFF=1, the baseline of a benchmark),
// its metrics, the order service, whose orders live beside the store's
// records (in PostgreSQL when it is there), the CORS policy for the
// origin in CORS_ORIGIN, per-user quotas (IDEM_QUOTA_INFLIGHT,
// IDEM_QUOTA_PER_MINUTE) and sealed records (IDEM_SEAL_KEYS).
package exampleapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/swaggo/swag"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/examples/internal/orders"
	"github.com/idem-go/idem/idemprom"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/redislock"
	"github.com/idem-go/idem/swagger"
)

// UserHeader carries the user a request acts for: a stand-in for real
// authentication, and the scope of idempotency keys.
const UserHeader = "X-User-ID"

// ReadTimeout bounds the reading of a request, its headers and body, in
// every example server: a client that stalls half-way is cut off rather than
// holding its connection for ever. No write timeout: delay_ms may hold a
// response as long as the client asks.
const ReadTimeout = 30 * time.Second

// RedisStartTimeout bounds the first call to REDIS_URL's Redis when it is
// the only store: an example whose Redis is down at start exits with the
// error after one dial's time, not after go-redis's retries (about 20 s).
// With DATABASE_URL too, the tiered store starts without Redis and falls
// back.
const RedisStartTimeout = 5 * time.Second

// App is what an example server needs.
type App struct {
	Addr   string       // $ADDR, default 127.0.0.1:8080
	Engine *core.Engine // scoped per user (UserHeader)
	Orders *orders.Service
	Logger *slog.Logger
	// Ops serves GET /metrics (Prometheus) and the admin endpoints:
	// mount it for those paths.
	Ops *http.ServeMux
	// CORS is what to answer to browsers of $CORS_ORIGIN (none if unset).
	CORS CORS
	rdb  redis.UniversalClient
	pool *pgxpool.Pool
	pg   interface {
		core.Store
		Close()
	} // a *pgstore.TxStore, or a *pgstore.Store with IDEM_TX=0
}

// Setup reads the environment and builds the App.
func Setup() (*App, error) {
	a := &App{Addr: os.Getenv("ADDR"), Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	if a.Addr == "" {
		a.Addr = "127.0.0.1:8080"
	}
	reg := prometheus.NewRegistry()
	metrics, err := idemprom.New(reg, nil)
	if err != nil {
		return nil, err
	}
	logs := core.SlogObserver(a.Logger)
	cfg := core.Config{
		Scope:    func(r *core.Request) string { return r.Header.Get(UserHeader) },
		Observer: func(ev core.Event) { logs(ev); metrics.Observe(ev) },
		// FailClosed (IDEM_FAIL_CLOSED): in limits.
	}
	if os.Getenv("IDEM_OFF") == "1" {
		cfg.Methods = []string{} // covers nothing: every request passes straight on
		a.Logger.Warn("IDEM_OFF=1: idempotency off: no request is covered, and the store logged holds the orders only")
	}
	if err := a.limits(&cfg); err != nil {
		return nil, err
	}
	redisURL, dbURL := os.Getenv("REDIS_URL"), os.Getenv("DATABASE_URL")
	if redisURL != "" {
		rdb, err := redislock.NewClient(redisURL)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		a.rdb = rdb
		if cfg.Store, err = redislock.New(rdb, nil); err != nil {
			return nil, err
		}
		a.Orders = orders.NewService(rdb)
	}
	if dbURL != "" {
		if err := a.setupPostgres(dbURL); err != nil {
			a.Close()
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
	}
	switch {
	case redisURL != "" && dbURL != "":
		// Redis may be down at start: the tiered store falls back. With
		// the transactional store, the order, the key and the response
		// commit in one PostgreSQL transaction (orders.Service.Create
		// writes through pgstore.Tx), and Redis serves the replays.
		cfg.Store = core.NewTiered(cfg.Store, a.pg)
		a.Logger.Info("store: redis in front of postgres", "redis", redacted(redisURL), "postgres", redacted(dbURL))
	case redisURL != "":
		ctx, cancel := context.WithTimeout(context.Background(), RedisStartTimeout)
		err := a.rdb.Ping(ctx).Err()
		cancel()
		if err != nil {
			a.Close()
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no answer within %v: %w", RedisStartTimeout, err)
			}
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		a.Logger.Info("store: redis", "url", redacted(redisURL))
	case dbURL != "":
		cfg.Store = a.pg
		_, tx := a.pg.(core.TxStore)
		a.Logger.Info("store: postgres", "url", redacted(dbURL), "transactional", tx)
	default:
		a.Logger.Info("store: memory (set REDIS_URL or DATABASE_URL to share keys between instances)")
		cfg.Store = core.NewMemoryStore(0)
		a.Orders = orders.NewService(nil)
	}
	if a, ok := cfg.Store.(core.Admin); ok {
		reg.MustRegister(idemprom.NewStuckKeys(a, 0))
	}
	cfg.Store = metrics.InstrumentStore(cfg.Store)
	a.Ops = http.NewServeMux()
	a.Ops.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	eng, err := core.New(cfg)
	if err != nil {
		a.Close()
		return nil, err
	}
	a.Engine = eng
	a.CORS = corsFor(os.Getenv("CORS_ORIGIN"), eng.Config())
	a.mountAdmin()
	return a, nil
}

// poolConns is the PostgreSQL pool's size unless DATABASE_URL sets
// pool_max_conns: the transactional mode holds a connection per running
// keyed request, and pgxpool's default (4 on 2 cores) would run 3 at once.
const poolConns = 16

// setupPostgres connects to dbURL, migrates idem's table and creates the
// orders' table.
func (a *App) setupPostgres(dbURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	if !strings.Contains(dbURL, "pool_max_conns") {
		cfg.MaxConns = poolConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	a.pool = pool
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	if err := pgstore.Migrate(ctx, pool, nil); err != nil {
		return err
	}
	opts := &pgstore.Options{Logger: a.Logger}
	if os.Getenv("IDEM_TX") == "0" {
		s, err := pgstore.New(pool, opts)
		if err != nil {
			return err
		}
		a.pg = s
	} else {
		s, err := pgstore.NewTx(pool, opts)
		if err != nil {
			return err
		}
		a.pg = s
	}
	a.Orders, err = orders.NewPostgresService(ctx, pool)
	return err
}

// Redis returns the client of REDIS_URL, or nil without one.
func (a *App) Redis() redis.UniversalClient { return a.rdb }

// Postgres returns the pool of DATABASE_URL, or nil without one.
func (a *App) Postgres() *pgxpool.Pool { return a.pool }

// Document adds the Idempotency-Key header and idem's responses to the
// operations ops of the swag-generated spec, once, before it is served.
// Without a host it drops swag's "host" line, whose empty value Swagger
// 2.0 does not allow: the API is then on the host serving the spec.
func (a *App) Document(spec *swag.Spec, ops []swagger.Operation) error {
	opts := swagger.OptionsFor(a.Engine.Config(), ops...)
	opts.BasePath = spec.BasePath
	tmpl := spec.SwaggerTemplate
	if spec.Host == "" {
		tmpl = strings.Replace(tmpl, "\n    \"host\": \"{{.Host}}\",", "", 1)
	}
	tmpl, err := swagger.InjectTemplate(tmpl, opts)
	if err != nil {
		return err
	}
	spec.SwaggerTemplate = tmpl
	return nil
}

// Close stops the PostgreSQL store's janitor and releases the Redis client
// or the PostgreSQL pool, if any.
func (a *App) Close() error {
	if a.pg != nil {
		a.pg.Close()
	}
	if a.pool != nil {
		a.pool.Close()
	}
	if a.rdb != nil {
		return a.rdb.Close()
	}
	return nil
}

// Serve listens on Addr and runs serve (http.Server.Serve, or the
// framework's) on that listener until SIGINT or SIGTERM, then shuts the
// server down with shutdown, giving requests in flight up to 10 seconds to
// finish, and returns once they have: a request cut off half-way would
// leave its key locked until the lock expires.
func (a *App) Serve(framework string, serve func(net.Listener) error, shutdown func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", a.Addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- serve(ln) }()
	a.Logger.Info("listening", "addr", ln.Addr().String(), "framework", framework)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return shutdown(shutdownCtx)
}

// redacted returns a URL with its password, if any, masked for the log.
func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
