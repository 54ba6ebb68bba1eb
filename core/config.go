package core

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idem-go/idem/internal/defaults"
)

// Defaults of Config.
const (
	defaultLegacyKeyHeader    = "X-Idempotency-Key"
	defaultMaxStoredBodyBytes = 1 << 20 // 1 MiB
	defaultLockTTL            = 5 * time.Minute
	defaultRetryAfter         = time.Second
	defaultStoreTimeout       = time.Second
	defaultBreakerFailures    = 5
	defaultBreakerCooldown    = 50 * time.Millisecond
)

// Headers the Engine adds to a replayed response.
const (
	// HeaderReplay marks a replayed response: "true" (Config.ReplayHeader).
	HeaderReplay = "X-Idempotency-Replay"
	// HeaderOriginalTimestamp carries, when Config.ReplayTimestamp is set, the
	// RFC 3339 time at which the first request arrived.
	HeaderOriginalTimestamp = "X-Original-Timestamp"
	// HeaderBodyOmitted is set on the replay of a response whose body was too
	// large to store: "sha256=<hex>; size=<bytes>" of the original body, which
	// the replay does not carry.
	HeaderBodyOmitted = "X-Idempotency-Body-Omitted"
)

// baseDeniedHeaders are never stored, whatever Config.DeniedHeaders says:
// hop-by-hop headers, the cookies a replay must not hand to another client,
// and the headers the server writes anew.
var baseDeniedHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Set-Cookie", "Set-Cookie2", "Content-Length", "Date",
}

// defaultDeniedHeaders is the default of Config.DeniedHeaders: X-Request-Id,
// which a request-id middleware sets on every request, so that a replay
// keeps the id of the request that asked for it.
var defaultDeniedHeaders = []string{"X-Request-Id"}

// DefaultStorable is the default store policy: every status below 500
// except 408 Request Timeout, 425 Too Early and 429 Too Many Requests,
// which tell the client to retry, and 499, the "client closed request" of
// nginx, grpc-gateway and connect-go (a call its client cancelled).
func DefaultStorable(status int) bool {
	return status < 500 && status != http.StatusRequestTimeout &&
		status != http.StatusTooEarly && status != http.StatusTooManyRequests && status != statusClientClosed
}

// statusClientClosed is nginx's 499 Client Closed Request, which grpc-gateway
// and connect-go answer for a call whose client cancelled it.
const statusClientClosed = 499

// Config configures an Engine. The zero value is usable: every zero field
// takes the default named in its comment.
type Config struct {
	// Store keeps records and locks. Default: a MemoryStore with its default
	// size, which protects a single instance only. New finds the optional
	// capabilities (Waiter, Checkpointer, Invalidator, quotas) through
	// stores that wrap another and say so with an Unwrap() Store method; a
	// store that wraps a TxStore must be one itself.
	Store Store

	// Methods the Engine covers, as requests carry them (upper-case: methods
	// are case-sensitive, and New refuses "post"); other requests pass
	// untouched. Default (nil): POST, PUT, PATCH and DELETE; an empty list
	// covers none.
	Methods []string
	// Required makes a covered request without a key fail with 400.
	// Default: false (a request without a key runs unprotected).
	Required bool
	// KeyHeader is the header carrying the key. Default: "Idempotency-Key".
	KeyHeader string
	// LegacyKeyHeader is also accepted; if both headers are sent they must
	// agree. Default: X-Idempotency-Key; "-" accepts no second header.
	LegacyKeyHeader string
	// MaxKeyLength is the longest key accepted, in bytes.
	// Default: 255.
	MaxKeyLength int
	// ValidateKey checks a key after the default rules (1 to MaxKeyLength
	// printable ASCII characters): idemkey.UUIDv4, idemkey.Token or your own;
	// its error is wrapped with ErrInvalidKey. Default: none.
	ValidateKey func(key string) error

	// Scope returns the scope of a request, such as the tenant or the
	// authenticated user. Keys of different scopes never meet. It gets a
	// copy of the Request (so does TTL), whose Header and Body it must not
	// read after it returns: Fiber's adapters read the framework's buffers,
	// reused for the next request. Default: none, one scope for all
	// requests.
	Scope func(*Request) string
	// ScopeRoute makes the route template part of the scope, so one key may
	// be used once per endpoint; the path, for a request whose route
	// template is unknown (Request.Route). Every instance on a store must
	// agree on it and on Scope: a change finds none of the keys stored
	// before, whose retries run again (docs/design.md, "The key").
	// Default: false.
	ScopeRoute bool
	// CriticalHeaders are request headers that join the fingerprint, so a
	// retry that changes one of them is a different request (422).
	// Default: none.
	CriticalHeaders []string

	// MaxBodyBytes is the largest request body read for the fingerprint;
	// a larger body with a key gets 413. Default: 1 MiB.
	MaxBodyBytes int64
	// MaxStoredBodyBytes is the largest response body stored; a larger one
	// is stored as its size and SHA-256, and its replay has no body but the
	// HeaderBodyOmitted header. Default: 1 MiB.
	MaxStoredBodyBytes int
	// Storable decides from the status code whether a response is stored.
	// Default: DefaultStorable.
	Storable func(status int) bool
	// DeniedHeaders are response headers never stored, beside the hop-by-hop
	// headers, Set-Cookie, Set-Cookie2, Content-Length and Date, which never
	// are. Default: X-Request-Id, which a middleware sets on every request.
	DeniedHeaders []string
	// KeepHeaders, if not empty, are the only response headers stored (less
	// the denied ones, which always win), as Fiber's KeepResponseHeaders; an
	// empty list is unset. Content-Type is one of the headers it filters: a
	// list without it replays the body without its type (net/http and Fiber
	// then send text/plain), so list it with the others, as in
	// []string{"Content-Type", "Location"}. Default: nil, every header not
	// denied.
	KeepHeaders []string

	// ResponseTTL is how long a stored response is kept; New refuses less
	// than a second. Default: 24 hours.
	ResponseTTL time.Duration
	// TTL overrides ResponseTTL per request, such as 72 hours for payments;
	// a result of zero or less means ResponseTTL. Default: none.
	TTL func(*Request) time.Duration
	// LockTTL bounds how long a lock outlives a crashed instance; it is
	// refreshed every LockTTL/3 while the handler runs, however long that is.
	// A refresh that cannot run in time (the process paused, as by a stop
	// signal or a VM's migration, past the lease: the initial lease, 10 s
	// by default, in a handler's first seconds) loses the lock, and a retry
	// meanwhile runs the handler again (docs/design.md, "The lease").
	// Default: 5 minutes.
	LockTTL time.Duration

	// Wait makes a request whose key is in flight wait up to this long for the
	// first one instead of a 409: it gets the replay, or runs the handler if
	// nothing was stored (docs/contract.md). Default: 0, no waiting.
	Wait time.Duration
	// RetryAfter is the Retry-After of a 409 (key in flight), of a 503 (the
	// store failed, with FailClosed, is busy or full, holds a record this server
	// cannot read, or did not commit) and of a 429 whose scope has too many
	// keys in flight (Quota). Default: 1 second.
	RetryAfter time.Duration
	// ReplayTimestamp adds HeaderOriginalTimestamp to replays. Default: false.
	ReplayTimestamp bool
	// ReplayHeader names the header that marks a replay, "true" (Stripe
	// sends Idempotent-Replayed). Default: HeaderReplay.
	ReplayHeader string
	// ProblemDocsURL, if set, makes the problem types ProblemDocsURL#missing-key
	// and so on, and every error carries Link: <ProblemDocsURL>; rel="describedby".
	// Default: none, the types of docs/problems.md
	// (https://github.com/idem-go/idem/blob/main/docs/problems.md#missing-key, ...).
	ProblemDocsURL string

	// StoreTimeout bounds each store call, whose client must honour the
	// context's deadline (redislock.NewClient's and pgx's do); past it the
	// call fails and FailClosed decides. Default: 1 second.
	StoreTimeout time.Duration
	// BreakerFailures failed Store.Acquire calls in a row open the circuit
	// breaker: requests skip the store (a store error) for BreakerCooldown,
	// then one probes it. Default: 5; negative disables it.
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before a probe.
	// Default: 50 ms.
	BreakerCooldown time.Duration

	// ReplayCache is how many bytes of completed records this process keeps,
	// to replay them without a store call until they expire or are purged
	// (docs/design.md, "Replay cache"). Default: 0, no cache.
	ReplayCache int64

	// Quota bounds the keys of each scope: a new key over it gets 429 with
	// Retry-After, a replay never does. New refuses it on a store that does
	// not enforce it (docs/design.md, "Quotas"). Default: none.
	Quota Quota

	// Sealer encrypts the records and Step checkpoints stored from now on
	// and authenticates those it reads: one that does not open, or one
	// stored in clear, is a store error, never replayed (docs/design.md,
	// "Encryption at rest"). Default: none.
	Sealer Sealer
	// ClearRecordsUntil, with a Sealer, lets records and checkpoints stored
	// in clear replay until then, by this process's clock, so that turning
	// sealing on does not refuse the keys stored before: set it to the
	// longest TTL in use (ResponseTTL, Config.TTL's, a call's) past the
	// last record stored in clear (the last instance without a Sealer
	// gone). After it, a record in clear is refused: anyone who can write
	// to the store could have planted it. Default: zero, none.
	ClearRecordsUntil time.Time

	// FailClosed answers 503 when the store fails. Default: false, the
	// request runs unprotected and an OutcomeStoreError is reported
	// (docs/design.md, "Fail-open"). A store slower than StoreTimeout
	// fails too (an overloaded machine, a pool opening connections), so
	// under fail-open duplicates may run then: set it where a duplicate
	// costs more than a refusal (payments).
	FailClosed bool
	// Observer receives every outcome, for logs and metrics (SlogObserver).
	// Default: none; store errors, lost locks, the breaker's changes and
	// fallbacks are then logged to slog.Default.
	Observer func(Event)
}

func (c *Config) setDefaults() error {
	if c.Store == nil {
		c.Store = NewMemoryStore(0)
	}
	if c.Methods == nil {
		c.Methods = defaults.Methods()
	}
	if c.KeyHeader == "" {
		c.KeyHeader = defaults.KeyHeader
	}
	// Canonical names: an http.Header lookup then allocates nothing.
	c.KeyHeader = http.CanonicalHeaderKey(c.KeyHeader)
	switch c.LegacyKeyHeader {
	case "":
		c.LegacyKeyHeader = defaultLegacyKeyHeader
	case "-":
		c.LegacyKeyHeader = ""
	default:
		c.LegacyKeyHeader = http.CanonicalHeaderKey(c.LegacyKeyHeader)
	}
	if c.MaxKeyLength == 0 {
		c.MaxKeyLength = defaults.MaxKeyLength
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = defaults.MaxBodyBytes
	}
	if c.MaxStoredBodyBytes == 0 {
		c.MaxStoredBodyBytes = defaultMaxStoredBodyBytes
	}
	if c.Storable == nil {
		c.Storable = DefaultStorable
	}
	if c.DeniedHeaders == nil {
		c.DeniedHeaders = defaultDeniedHeaders
	}
	if c.ResponseTTL == 0 {
		c.ResponseTTL = defaults.ResponseTTL
	}
	if c.LockTTL == 0 {
		c.LockTTL = defaultLockTTL
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = defaultRetryAfter
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = defaultStoreTimeout
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = defaultBreakerFailures
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = defaultBreakerCooldown
	}
	if c.ReplayHeader == "" {
		c.ReplayHeader = HeaderReplay
	}
	c.ReplayHeader = http.CanonicalHeaderKey(c.ReplayHeader)
	switch {
	case c.MaxKeyLength < 0, c.MaxBodyBytes < 0, c.MaxStoredBodyBytes < 0, c.ReplayCache < 0:
		return errors.New("idem: negative size limit in Config")
	case c.ResponseTTL < 0, c.LockTTL < 0, c.Wait < 0, c.RetryAfter < 0, c.StoreTimeout < 0, c.BreakerCooldown < 0:
		return errors.New("idem: negative duration in Config")
	case c.LockTTL < 3*time.Millisecond:
		return errors.New("idem: LockTTL must be at least 3ms")
	case c.ResponseTTL < time.Second:
		// A bare number is nanoseconds (ResponseTTL: 86400): the record
		// would be gone before any retry, which would run the work again.
		return errors.New("idem: ResponseTTL must be at least 1s")
	case c.Quota.set() && !enforcesQuota(c.Store):
		return errors.New("idem: Config.Quota: the store does not enforce quotas (core.QuotaFromContext)")
	case wrapsTx(c.Store):
		return errors.New("idem: Config.Store wraps a TxStore but is not one, so the work would not write in its transaction")
	}
	if err := c.checkNames(); err != nil {
		return err
	}
	if t, ok := find[interface{ valid() error }](c.Store); ok {
		if err := t.valid(); err != nil {
			return err
		}
	}
	if err := c.Quota.setDefaults(); err != nil {
		return err
	}
	return nil
}

// checkNames refuses a method or a header name that no request carries,
// which would leave every request unprotected without a word: a name that
// is not an HTTP token (RFC 9110), or a method with a lower-case letter
// ("post": methods are case-sensitive).
func (c *Config) checkNames() error {
	for _, m := range c.Methods {
		switch {
		case !isToken(m):
			return fmt.Errorf("idem: Config.Methods: %q is not a method", m)
		case strings.ToUpper(m) != m:
			return fmt.Errorf("idem: Config.Methods: %q is not upper-case: methods are case-sensitive, so it would not cover %q", m, strings.ToUpper(m))
		}
	}
	for _, h := range [...]struct{ field, name string }{
		{"KeyHeader", c.KeyHeader}, {"LegacyKeyHeader", c.LegacyKeyHeader}, {"ReplayHeader", c.ReplayHeader},
	} {
		if h.name != "" && !isToken(h.name) {
			return fmt.Errorf("idem: Config.%s: %q is not a header name", h.field, h.name)
		}
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2): a
// method or a header name.
func isToken(s string) bool {
	for i := range len(s) {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// wrapsTx reports whether s is not a TxStore but wraps one (Unwrap).
func wrapsTx(s Store) bool {
	if _, ok := s.(TxStore); ok {
		return false
	}
	_, ok := find[TxStore](s)
	return ok
}

// cloneSlices gives c slices of its own, so that neither the caller of New
// nor of Engine.Config shares them with the Engine.
func (c *Config) cloneSlices() {
	c.Methods = slices.Clone(c.Methods)
	c.CriticalHeaders = slices.Clone(c.CriticalHeaders)
	c.DeniedHeaders = slices.Clone(c.DeniedHeaders)
	c.KeepHeaders = slices.Clone(c.KeepHeaders)
}
