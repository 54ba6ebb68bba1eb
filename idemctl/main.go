// Command idemctl inspects and repairs the idempotency keys of an idem store
// on Redis or PostgreSQL:
//
//	idemctl (-redis URL | -postgres URL | both) <inspect|purge|unlock|inflight> [flags]
//
//	inspect   a key's status, stored status code, times, expiry and size (-body: the stored response too)
//	purge     forget a completed key so that a corrected request runs again; refused while in flight
//	unlock    drop the lock of a stuck key (needs -yes): a request still running may then run twice
//	inflight  the keys in flight, the oldest first, with their age
//
// A key is named as the Engine stores it: -scope (what Config.Scope returns:
// the examples use the X-User-ID header), -key (the Idempotency-Key) and
// -route (only for an Engine with Config.ScopeRoute); or -id, the store key
// that inflight lists. With both URLs idemctl works on the tiered store
// (core.NewTiered) as the Engine does: a purge of one tier alone would leave
// the other's record to be replayed. Flags may come before or after the command. -json
// prints JSON (the admin package's Key and KeyList), otherwise a table.
//
// A Redis URL gets max_retries=-1 and dial_timeout=2s unless it sets them:
// one attempt, so that a Redis that is down says so at once.
//
// Records sealed by an Engine's core.Config.Sealer show their times and key
// id only, unless IDEM_SEAL_KEYS holds the keys (as the examples read them,
// seal.ParseKeys): inspect then opens them.
//
// Exit codes: 0 done, 1 not found, 2 refused (in flight, or unlock without
// -yes), 3 store error, 4 a record that does not decode or open, or, with
// IDEM_SEAL_KEYS, one stored in clear, which an Engine with a Sealer refuses
// (inspect prints what it can and why), 64 usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/redislock"
	"github.com/idem-go/idem/seal"
)

// Exit codes.
const (
	exitOK       = 0
	exitNotFound = 1
	exitRefused  = 2
	exitStore    = 3
	exitRecord   = 4  // inspect: the record does not decode, does not open with IDEM_SEAL_KEYS, or is in clear under them
	exitUsage    = 64 // EX_USAGE of sysexits.h
)

func main() {
	redis.SetLogger(quiet{}) // its errors are the operation's, printed once
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: idemctl (-redis URL | -postgres URL | both: tiered) <inspect|purge|unlock|inflight> [flags]

  inspect   -scope S -key K [-route R] | -id ID  [-body]
  purge     -scope S -key K [-route R] | -id ID
  unlock    -scope S -key K [-route R] | -id ID  -yes
  inflight  [-limit N]

IDEM_SEAL_KEYS=<id>:<base64 key>[,...] opens sealed records (inspect)

exit codes: 0 done, 1 not found, 2 refused (in flight, no -yes), 3 store error, 4 record does not decode or open, 64 usage

flags:
`

type options struct {
	redis, postgres       string
	prefix, schema, table string
	scope, key, route, id string
	json, yes, body       bool
	limit                 int
	timeout               time.Duration
}

// run runs idemctl with args and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("idemctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.redis, "redis", "", "Redis `URL` (redis://, rediss://, redis+cluster://, redis+sentinel://, unix://)")
	fs.StringVar(&o.postgres, "postgres", "", "PostgreSQL `URL` (postgres://user@host:5432/db)")
	fs.StringVar(&o.prefix, "prefix", redislock.DefaultPrefix, "Redis key prefix (redislock.Options.Prefix)")
	fs.StringVar(&o.schema, "schema", "", "PostgreSQL schema of the table (default: the search_path)")
	fs.StringVar(&o.table, "table", pgstore.DefaultTable, "PostgreSQL table")
	fs.StringVar(&o.scope, "scope", "", "the key's scope (the examples: the X-User-ID header)")
	fs.StringVar(&o.key, "key", "", "the client's Idempotency-Key, unquoted (abc for \"abc\")")
	fs.StringVar(&o.route, "route", "", "the route, only if the Engine sets Config.ScopeRoute")
	fs.StringVar(&o.id, "id", "", "the store key (64 hex digits, as inflight lists it) instead of -scope, -key, -route")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.BoolVar(&o.yes, "yes", false, "confirm unlock")
	fs.BoolVar(&o.body, "body", false, "inspect: print the stored headers and body too")
	fs.IntVar(&o.limit, "limit", admin.DefaultInFlightLimit, "inflight: the most keys listed")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound on the whole operation")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}

	// The command may come after global flags; its own flags follow it.
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	cmd := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return parseExit(err)
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "idemctl: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(exitUsage, "unexpected argument %q (flags take -name value)", fs.Arg(0))
	}
	var id string
	switch cmd {
	case "inspect", "purge", "unlock":
		var err error
		if id, err = (admin.Target{Scope: o.scope, Key: o.key, Route: o.route, ID: o.id}).StoreKey(); err != nil {
			return fail(exitUsage, "%s: %v", cmd, err)
		}
	case "inflight":
		if o.limit < 1 {
			return fail(exitUsage, "-limit must be at least 1")
		}
	default:
		return fail(exitUsage, "unknown command %q (inspect, purge, unlock, inflight)", cmd)
	}
	if cmd == "unlock" && !o.yes {
		return fail(exitRefused, "unlock drops the lock of a request that may still be running, which a retry may then run again: add -yes to confirm")
	}

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	store, closeStore, err := open(ctx, &o)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer closeStore()

	out := func(v any, text func(io.Writer) error) int {
		var err error
		if o.json {
			var b []byte
			if b, err = json.Marshal(v); err == nil {
				_, err = stdout.Write(append(escapeJSON(b), '\n'))
			}
		} else {
			err = text(stdout)
		}
		if err != nil {
			return fail(exitStore, "%v", err)
		}
		return exitOK
	}
	switch cmd {
	case "inspect":
		var sealer core.Sealer
		if spec := os.Getenv("IDEM_SEAL_KEYS"); spec != "" {
			keys, err := seal.ParseKeys(spec)
			if err != nil {
				return fail(exitUsage, "IDEM_SEAL_KEYS: %v", err)
			}
			sealer = seal.New(keys)
		}
		k, err := admin.Inspect(ctx, store, id, o.body, sealer)
		if err != nil {
			return storeExit(stderr, id, err)
		}
		code := out(k, func(w io.Writer) error { return admin.WriteKey(w, k) })
		if code == exitOK && k.Error != "" {
			return exitRecord
		}
		return code
	case "purge", "unlock":
		op, done := store.Purge, "purged"
		if cmd == "unlock" {
			op, done = store.Unlock, "unlocked"
		}
		if err := op(ctx, id); err != nil {
			return storeExit(stderr, id, err)
		}
		return out(map[string]any{"id": id, done: true}, func(w io.Writer) error {
			_, err := fmt.Fprintln(w, done, id)
			return err
		})
	default: // inflight
		keys, err := admin.InFlight(ctx, store, o.limit)
		if err != nil {
			return storeExit(stderr, "", err)
		}
		return out(admin.KeyList{Keys: keys}, func(w io.Writer) error { return admin.WriteKeys(w, keys) })
	}
}

func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// storeExit reports err of the operation on id and returns its exit code.
func storeExit(stderr io.Writer, id string, err error) int {
	switch {
	case errors.Is(err, core.ErrNotFound):
		fmt.Fprintf(stderr, "idemctl: not found: %s\n", id)
		return exitNotFound
	case errors.Is(err, core.ErrInFlight) && err != core.ErrInFlight: // the store says more: who holds it
		fmt.Fprintf(stderr, "idemctl: %s: %v\n", id, err)
		return exitRefused
	case errors.Is(err, core.ErrInFlight):
		fmt.Fprintf(stderr, "idemctl: in flight: %s: a request holds its lock (retry when it is done; unlock -yes drops a stuck lock)\n", id)
		return exitRefused
	}
	fmt.Fprintf(stderr, "idemctl: store error: %v\n", err)
	return exitStore
}

// open returns the store o names and a function that closes it: with both
// URLs, the tiered store of an Engine on core.NewTiered(redis, postgres),
// whose keys live in both. Its errors are usage errors: a bad URL or option
// (the store is reached only later).
func open(ctx context.Context, o *options) (core.Admin, func(), error) {
	switch {
	case o.redis == "" && o.postgres == "":
		return nil, nil, errors.New("give -redis URL, -postgres URL, or both (a tiered store)")
	case o.postgres == "" && (o.schema != "" || o.table != pgstore.DefaultTable):
		return nil, nil, errors.New("-schema and -table are for -postgres")
	case o.redis == "" && o.prefix != redislock.DefaultPrefix:
		return nil, nil, errors.New("-prefix is for -redis")
	case strings.ContainsAny(o.prefix, "{}") || o.prefix == "":
		return nil, nil, fmt.Errorf("-prefix %q: empty or holding a brace", o.prefix)
	}
	var (
		rs     *redislock.Store
		ps     *pgstore.Store
		closes []func()
	)
	closeAll := func() {
		for _, c := range closes {
			c()
		}
	}
	if o.redis != "" {
		client, err := redislock.NewClient(oneShot(o.redis))
		if err != nil {
			return nil, nil, err
		}
		closes = append(closes, func() { client.Close() })
		if rs, err = redislock.New(client, &redislock.Options{Prefix: o.prefix, DisableBatching: true}); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	if o.postgres != "" {
		cfg, err := pgxpool.ParseConfig(o.postgres)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("-postgres: %w", err)
		}
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("-postgres: %w", err)
		}
		closes = append(closes, pool.Close)
		if ps, err = pgstore.New(pool, &pgstore.Options{Schema: o.schema, Table: o.table, JanitorInterval: -1, Timeout: o.timeout}); err != nil {
			closeAll()
			return nil, nil, err
		}
		closes = append([]func(){ps.Close}, closes...)
	}
	switch {
	case rs == nil:
		return ps, closeAll, nil
	case ps == nil:
		return rs, closeAll, nil
	}
	return core.NewTiered(rs, ps).(core.Admin), closeAll, nil
}

// oneShot returns redisURL with max_retries=-1 and dial_timeout=2s unless
// it sets them: redislock.NewClient's client rides through a Redis restart
// (a refused dial tried again until dial_timeout, each command tried
// max_retries+1 times: 20 s with go-redis's defaults), where an operator
// wants to hear at once that Redis is down.
func oneShot(redisURL string) string {
	u, err := url.Parse(redisURL)
	if err != nil {
		return redisURL // NewClient says what is wrong with it
	}
	q := u.Query()
	for _, p := range []string{"max_retries=-1", "dial_timeout=2s"} {
		if name, _, _ := strings.Cut(p, "="); !q.Has(name) {
			if u.RawQuery != "" {
				u.RawQuery += "&"
			}
			u.RawQuery += p
		}
	}
	return u.String()
}

// escapeJSON returns the JSON b with the runes that encoding/json leaves
// raw but a terminal may act on (DEL, C1 controls such as U+009B, bidi
// overrides) written as \u escapes: the same JSON, never raw on a terminal.
func escapeJSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r < utf8.RuneSelf && r != 0x7f || strconv.IsPrint(r) || r == utf8.RuneError && size == 1 {
			if out != nil {
				out = append(out, b[i:i+size]...)
			}
			i += size
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	if out == nil {
		return b
	}
	return out
}

// quiet is a go-redis logger that logs nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
