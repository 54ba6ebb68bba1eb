// Package orders is the small order API that every example server exposes,
// whatever its framework: the business logic behind the handlers, kept in
// one place so that the examples behave the same and differ only in how
// each framework wires idem in.
package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/pgstore"
)

// CreateRequest is the body of POST /orders.
type CreateRequest struct {
	Item    string `json:"item"`
	Qty     int    `json:"qty"`
	DelayMS int    `json:"delay_ms,omitempty"` // sleep first, to show in-flight duplicates
}

// Order is a created order.
type Order struct {
	ID   string `json:"id"`
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

// List is the body of GET /orders.
type List struct {
	Count  int     `json:"count"`
	Orders []Order `json:"orders"`
}

// Error is the body of the handlers' own errors (400, 500): not a problem
// document, so that a client can tell the application's errors from idem's.
type Error struct {
	Error string `json:"error"`
}

// ErrInvalid is a request the handler refuses with 400; ErrBoom is the
// simulated failure (item "boom") it answers with 500.
var (
	ErrInvalid = errors.New("invalid order")
	ErrBoom    = errors.New("the order service failed (item \"boom\")")
)

// InternalError is the message of a 500 for an unexpected error of the
// service: its text, which may name the database's types and echo the
// request's bytes, goes to the log only (ServerError).
const InternalError = "internal error"

// ServerError logs err, an error of Create or List answered with 500, and
// returns the message the client gets: ErrBoom's text for the simulated
// failure, InternalError for any other.
func ServerError(log *slog.Logger, err error) string {
	log.Error("order service failed", "error", err)
	if errors.Is(err, ErrBoom) {
		return ErrBoom.Error()
	}
	return InternalError
}

// MaxQty is the largest qty: the orders' table holds it in a PostgreSQL
// integer.
const MaxQty = 1_000_000

// Service creates and lists orders, in memory or, when several instances
// share a Redis or a PostgreSQL database, there, so that GET /orders on any
// instance shows what was really created.
type Service struct {
	rdb  redis.UniversalClient // nil: in memory, or PostgreSQL
	pool *pgxpool.Pool         // nil: in memory, or Redis
	mu   sync.Mutex
	mem  []Order
}

// NewService returns a Service on rdb, or in memory if rdb is nil.
func NewService(rdb redis.UniversalClient) *Service { return &Service{rdb: rdb} }

// PostgresTable holds the orders of a Service on PostgreSQL.
const PostgresTable = "idem_example_orders"

// NewPostgresService returns a Service on PostgreSQL, creating its table
// if needed (under an advisory lock: instances may start together).
func NewPostgresService(ctx context.Context, pool *pgxpool.Pool) (*Service, error) {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", PostgresTable); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+PostgresTable+` (
	id         bigserial PRIMARY KEY,
	item       text NOT NULL,
	qty        integer NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now())`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("orders table: %w", err)
	}
	return &Service{pool: pool}, nil
}

const (
	redisList = "idem-example:orders"
	redisSeq  = "idem-example:order-seq"
	// redisTimeout bounds each call to Redis: without a deadline, a call
	// to a Redis that is down waits for it to come back (redislock.NewClient).
	redisTimeout = time.Second
	// postgresTimeout bounds an order's INSERT, which a client that hangs
	// up does not cut off (Create).
	postgresTimeout = 5 * time.Second
)

// MaxBodyBytes bounds a POST /orders body, with a key or without: idem
// refuses a keyed body over its Config.MaxBodyBytes (the same 1 MiB by
// default) before the handler runs, and ReadBody refuses the others.
const MaxBodyBytes = 1 << 20

// ErrTooLarge is ReadBody's and ReadFastBody's error for a body over
// MaxBodyBytes.
var ErrTooLarge = errors.New("request body over 1 MiB")

// ReadBody reads a request body as received, at most MaxBodyBytes of it.
// The handlers read no more: a request without a key, which idem does not
// read, could otherwise fill the process's memory.
func ReadBody(r io.Reader) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r, MaxBodyBytes+1))
	if err == nil && len(body) > MaxBodyBytes {
		return nil, ErrTooLarge
	}
	return body, err
}

// FastRequest is what ReadFastBody needs of a *fasthttp.Request.
type FastRequest interface {
	IsBodyStream() bool
	BodyStream() io.Reader
	Body() []byte
}

// ReadFastBody is ReadBody for the Fiber examples: the body as received,
// streamed (Fiber's StreamRequestBody) or not. Fiber's c.Body() would
// inflate a compressed body without bound (idem bounds the bytes received:
// docs/design.md, "Compressed bodies"), and read a streamed body to its end.
func ReadFastBody(r FastRequest) ([]byte, error) {
	if r.IsBodyStream() {
		return ReadBody(r.BodyStream())
	}
	if len(r.Body()) > MaxBodyBytes {
		return nil, ErrTooLarge
	}
	return r.Body(), nil
}

// BodyStatus is the status of a ReadBody or ReadFastBody error: 413 for ErrTooLarge, 400
// for a body the client broke off.
func BodyStatus(err error) int {
	if errors.Is(err, ErrTooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// Decode parses a POST /orders body; broken JSON, no item, an item with a
// NUL (which PostgreSQL's text refuses) or qty outside 1..MaxQty is
// ErrInvalid.
func Decode(body []byte) (CreateRequest, error) {
	var req CreateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return req, req.validate()
}

func (r CreateRequest) validate() error {
	switch {
	case r.Item == "":
		return fmt.Errorf("%w: item is required", ErrInvalid)
	case strings.ContainsRune(r.Item, 0):
		return fmt.Errorf("%w: item must not contain NUL", ErrInvalid)
	case r.Qty <= 0:
		return fmt.Errorf("%w: qty must be positive", ErrInvalid)
	case r.Qty > MaxQty:
		return fmt.Errorf("%w: qty must be at most %d", ErrInvalid, MaxQty)
	}
	return nil
}

// Create runs the side effect that must happen once per key: it creates
// the order. It sleeps DelayMS first and fails with ErrBoom for "boom".
func (s *Service) Create(ctx context.Context, req CreateRequest) (Order, error) {
	if req.DelayMS > 0 {
		select {
		case <-time.After(time.Duration(req.DelayMS) * time.Millisecond):
		case <-ctx.Done():
			return Order{}, ctx.Err()
		}
	}
	if req.Item == "boom" {
		return Order{}, ErrBoom
	}
	// From here the order may be written: a client that hangs up must not
	// turn a write that happened into an error, which would release the
	// key for a retry that writes it again.
	ctx = context.WithoutCancel(ctx)
	o := Order{Item: req.Item, Qty: req.Qty}
	if s.pool != nil {
		// Through the request's transaction when idem holds its key in one
		// (pgstore.NewTx): the order commits with the stored response.
		db := pgstore.TxOr(ctx, s.pool)
		ctx, cancel := context.WithTimeout(ctx, postgresTimeout)
		defer cancel()
		var id int64
		err := db.QueryRow(ctx, "INSERT INTO "+PostgresTable+" (item, qty) VALUES ($1, $2) RETURNING id", o.Item, o.Qty).Scan(&id)
		if err != nil {
			return Order{}, err
		}
		o.ID = "ord_" + strconv.FormatInt(id, 10)
		return o, nil
	}
	if s.rdb == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		o.ID = "ord_" + strconv.Itoa(len(s.mem)+1)
		s.mem = append(s.mem, o)
		return o, nil
	}
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	n, err := s.rdb.Incr(ctx, redisSeq).Result()
	if err != nil {
		return Order{}, err
	}
	o.ID = "ord_" + strconv.FormatInt(n, 10)
	b, _ := json.Marshal(o)
	if err := s.rdb.RPush(ctx, redisList, b).Err(); err != nil {
		return Order{}, err
	}
	return o, nil
}

// List returns every order created so far.
func (s *Service) List(ctx context.Context) (List, error) {
	if s.pool != nil {
		rows, err := s.pool.Query(ctx, "SELECT 'ord_' || id, item, qty FROM "+PostgresTable+" ORDER BY id")
		if err != nil {
			return List{}, err
		}
		orders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Order, error) {
			var o Order
			return o, r.Scan(&o.ID, &o.Item, &o.Qty)
		})
		if err != nil {
			return List{}, err
		}
		return List{Count: len(orders), Orders: append([]Order{}, orders...)}, nil
	}
	if s.rdb == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return List{Count: len(s.mem), Orders: append([]Order{}, s.mem...)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	raw, err := s.rdb.LRange(ctx, redisList, 0, -1).Result()
	if err != nil {
		return List{}, err
	}
	l := List{Count: len(raw), Orders: make([]Order, 0, len(raw))}
	for _, r := range raw {
		var o Order
		if err := json.Unmarshal([]byte(r), &o); err != nil {
			return List{}, err
		}
		l.Orders = append(l.Orders, o)
	}
	return l, nil
}
