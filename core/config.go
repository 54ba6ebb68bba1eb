package core

import (
	"errors"
	"net/http"
	"slices"
	"time"
)

// Defaults of Config.
const (
	DefaultKeyHeader          = "Idempotency-Key"
	DefaultLegacyKeyHeader    = "X-Idempotency-Key"
	DefaultMaxKeyLength       = 255
	DefaultMaxBodyBytes       = 1 << 20 // 1 MiB
	DefaultMaxStoredBodyBytes = 1 << 20 // 1 MiB
	DefaultResponseTTL        = 24 * time.Hour
	DefaultLockTTL            = 5 * time.Minute
	DefaultRetryAfter         = time.Second
	DefaultStoreTimeout       = time.Second
	DefaultBreakerFailures    = 5
	DefaultBreakerCooldown    = 50 * time.Millisecond
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

// DefaultMethods are the methods the Engine covers by default.
var DefaultMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// DefaultDeniedHeaders are the response headers never stored: hop-by-hop
// headers, Set-Cookie (a session must not be handed to whoever replays the
// key), Content-Length and Date, which the server writes anew, and
// X-Request-Id, which a request-id middleware sets on every request: a
// replay keeps the id of the request that asked for it, for tracing.
var DefaultDeniedHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Set-Cookie", "Set-Cookie2", "Content-Length", "Date", "X-Request-Id",
}

// DefaultStorable is the default store policy: every status below 500
// except 408 Request Timeout, 425 Too Early and 429 Too Many Requests,
// which tell the client to retry.
func DefaultStorable(status int) bool {
	return status < 500 && status != http.StatusRequestTimeout &&
		status != http.StatusTooEarly && status != http.StatusTooManyRequests
}

// Config configures an Engine. The zero value is usable: every zero field
// takes the default named in its comment.
type Config struct {
	// Store keeps records and locks. Default: a MemoryStore with its default
	// size, which protects a single instance only.
	Store Store

	// Methods the Engine covers; other requests pass untouched.
	// Default: DefaultMethods.
	Methods []string
	// Required makes a covered request without a key fail with 400.
	// Default: false (a request without a key runs unprotected).
	Required bool
	// KeyHeader is the header carrying the key. Default: DefaultKeyHeader.
	KeyHeader string
	// LegacyKeyHeader is also accepted; if both headers are sent they must
	// agree. Default: DefaultLegacyKeyHeader; "-" accepts no second header.
	LegacyKeyHeader string
	// MaxKeyLength is the longest key accepted, in bytes.
	// Default: DefaultMaxKeyLength.
	MaxKeyLength int
	// ValidateKey adds a rule to the default ones (printable ASCII,
	// 1 to MaxKeyLength bytes): ValidateUUID, ValidateUUIDv4, ValidateToken,
	// ValidateStructuredKey or your own. Default: none.
	ValidateKey KeyValidator

	// Scope returns the scope of a request, such as the tenant or the
	// authenticated user. Keys of different scopes never meet. Default: none,
	// one scope for all requests.
	Scope func(*Request) string
	// ScopeRoute makes the route template part of the scope, so one key may
	// be used once per endpoint. Default: false.
	ScopeRoute bool
	// CriticalHeaders are request headers that join the fingerprint, so a
	// retry that changes one of them is a different request (422).
	// Default: none.
	CriticalHeaders []string

	// MaxBodyBytes is the largest request body read for the fingerprint;
	// a larger body with a key gets 413. Default: DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxStoredBodyBytes is the largest response body stored; a larger one
	// is stored as its size and SHA-256, and its replay has no body but the
	// HeaderBodyOmitted header. Default: DefaultMaxStoredBodyBytes.
	MaxStoredBodyBytes int
	// Storable decides from the status code whether a response is stored.
	// Default: DefaultStorable.
	Storable func(status int) bool
	// DeniedHeaders are response headers never stored.
	// Default: DefaultDeniedHeaders.
	DeniedHeaders []string
	// KeepHeaders, if not nil, are the only response headers stored (less
	// DeniedHeaders, which always win), as Fiber's KeepResponseHeaders.
	// Default: nil, every header not denied.
	KeepHeaders []string

	// ResponseTTL is how long a stored response is kept.
	// Default: DefaultResponseTTL.
	ResponseTTL time.Duration
	// TTL overrides ResponseTTL per request, such as 72 hours for payments;
	// a result of zero or less means ResponseTTL. Default: none.
	TTL func(*Request) time.Duration
	// LockTTL bounds how long a lock outlives a crashed instance. The lock is
	// refreshed every LockTTL/3 while the handler runs, for as long as it
	// runs: a handler that never returns keeps its key in flight (409), so
	// bound handlers with the request's context or a timeout of their own.
	// Default: DefaultLockTTL.
	LockTTL time.Duration

	// Wait makes a request whose key is in flight wait up to this long for the
	// first request to finish, instead of an immediate 409: it then gets the
	// replay, or, if the first request stored nothing (a 5xx), runs the
	// handler itself. A store error while it waits does not make it run
	// unprotected: it keeps waiting, and gets the 409 at the deadline.
	// Default: 0, no waiting.
	Wait time.Duration
	// RetryAfter is the Retry-After of a 409 (key in flight) and of a 503
	// (store unavailable, with FailClosed). Default: DefaultRetryAfter.
	RetryAfter time.Duration
	// ReplayTimestamp adds HeaderOriginalTimestamp to replays. Default: false.
	ReplayTimestamp bool
	// ReplayHeader names the header that marks a replay, "true" (Stripe
	// sends Idempotent-Replayed). Default: HeaderReplay.
	ReplayHeader string
	// ProblemDocsURL is where the API documents its idempotency errors:
	// problem types become ProblemDocsURL#missing-key and so on, and every
	// error carries Link: <ProblemDocsURL>; rel="describedby". Default: none,
	// the types of the Problem constants and no Link.
	ProblemDocsURL string

	// StoreTimeout bounds each store call; past it the call fails and the
	// policy (FailClosed) applies. The store's client must honour the
	// context's deadline (redislock.NewClient's and pgx's do).
	// Default: DefaultStoreTimeout.
	StoreTimeout time.Duration
	// BreakerFailures is how many failed Store.Acquire calls in a row open
	// the circuit breaker: for BreakerCooldown, requests do not call the
	// store and fail at once with ErrCircuitOpen (the policy applies); then
	// one request probes it. Default: DefaultBreakerFailures; negative disables it.
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before a probe.
	// Default: DefaultBreakerCooldown.
	BreakerCooldown time.Duration

	// ReplayCache is how many bytes of completed records this process keeps,
	// to replay them without a store call, each until it expires or, with a
	// store that is an Invalidator (redislock), until an admin purges it.
	// Default: 0, no cache. See docs/design.md, "Replay cache".
	ReplayCache int64

	// FailClosed answers 503 when the store fails. Default: false: the
	// request runs unprotected and an OutcomeStoreError is reported
	// (fail-open), as a store outage should not take the API down. A full
	// MemoryStore is no store error: it evicts the record that expires
	// soonest (see MemoryStore; only a store full of locks answers
	// ErrStoreFull), so size it, or use a shared store with no eviction,
	// such as Redis with maxmemory-policy noeviction.
	FailClosed bool
	// Observer receives every outcome, for logs and metrics (SlogObserver).
	// Default: none.
	Observer func(Event)
}

func (c *Config) setDefaults() error {
	if c.Store == nil {
		c.Store = NewMemoryStore(0)
	}
	if c.Methods == nil {
		c.Methods = DefaultMethods
	}
	if c.KeyHeader == "" {
		c.KeyHeader = DefaultKeyHeader
	}
	// Canonical names: an http.Header lookup then allocates nothing.
	c.KeyHeader = http.CanonicalHeaderKey(c.KeyHeader)
	switch c.LegacyKeyHeader {
	case "":
		c.LegacyKeyHeader = DefaultLegacyKeyHeader
	case "-":
		c.LegacyKeyHeader = ""
	default:
		c.LegacyKeyHeader = http.CanonicalHeaderKey(c.LegacyKeyHeader)
	}
	if c.MaxKeyLength == 0 {
		c.MaxKeyLength = DefaultMaxKeyLength
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxStoredBodyBytes == 0 {
		c.MaxStoredBodyBytes = DefaultMaxStoredBodyBytes
	}
	if c.Storable == nil {
		c.Storable = DefaultStorable
	}
	if c.DeniedHeaders == nil {
		c.DeniedHeaders = DefaultDeniedHeaders
	}
	if c.ResponseTTL == 0 {
		c.ResponseTTL = DefaultResponseTTL
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = DefaultBreakerCooldown
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
	}
	return nil
}

// cloneSlices gives c slices of its own, so that neither the caller of New
// nor of Engine.Config shares them with the Engine.
func (c *Config) cloneSlices() {
	c.Methods = slices.Clone(c.Methods)
	c.CriticalHeaders = slices.Clone(c.CriticalHeaders)
	c.DeniedHeaders = slices.Clone(c.DeniedHeaders)
	c.KeepHeaders = slices.Clone(c.KeepHeaders)
}
