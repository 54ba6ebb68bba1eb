package grpcidem

import (
	"cmp"
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Metadata names, lower-case as gRPC metadata keys are. The server reads
// the key from the lower-cased core.Config.KeyHeader and LegacyKeyHeader,
// which are these by default.
const (
	KeyMetadata       = "idempotency-key"
	LegacyKeyMetadata = "x-idempotency-key"
	// ReplayMetadata is the header metadata of a replayed reply: "true".
	ReplayMetadata = "x-idempotency-replay"
)

// ErrorDomain is the Domain of the errdetails.ErrorInfo that the server's
// own errors carry; their Reason is one of the Reason constants.
const ErrorDomain = "github.com/idem-go/idem"

// Reasons of the server's own errors, in their errdetails.ErrorInfo.
const (
	ReasonMissingKey       = "MISSING_KEY"       // InvalidArgument: no key, and keys are required
	ReasonInvalidKey       = "INVALID_KEY"       // InvalidArgument: the key is malformed
	ReasonKeyInFlight      = "KEY_IN_FLIGHT"     // Aborted: a call with this key is running
	ReasonKeyReused        = "KEY_REUSED"        // AlreadyExists: the key was used with another request
	ReasonStoreUnavailable = "STORE_UNAVAILABLE" // Unavailable: the store failed (FailClosed) or is busy, a commit failed, a record does not read
	ReasonReplyOmitted     = "REPLY_OMITTED"     // FailedPrecondition: the call ran, its reply was too large to store
	ReasonQuotaExceeded    = "QUOTA_EXCEEDED"    // ResourceExhausted: the scope is over core.Config.Quota
)

// Defaults of the client interceptor.
const (
	DefaultMaxAttempts = 4
	DefaultBaseDelay   = 100 * time.Millisecond
	DefaultMaxDelay    = 5 * time.Second
)

// DefaultStorable is the server's default store policy: OK and the codes
// of client errors (InvalidArgument, NotFound, AlreadyExists,
// PermissionDenied, FailedPrecondition, OutOfRange, Unauthenticated) are
// stored; the others, server errors and codes that tell the client to retry
// (Canceled, Aborted, Unavailable, DeadlineExceeded, ResourceExhausted...),
// release the key, so that a retry runs the handler again.
func DefaultStorable(c codes.Code) bool {
	switch c {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated:
		return true
	}
	return false
}

// Replayed reports whether header, the header metadata of a reply
// (grpc.Header), marks a replay. If an interceptor chained before the
// server's grpcidem sends the header before the call runs (grpc.SendHeader),
// a replay's metadata, its mark included, comes in the trailer instead
// (grpc.Trailer): ask Replayed of that too.
func Replayed(header metadata.MD) bool {
	v := header.Get(ReplayMetadata)
	return len(v) > 0 && v[0] == "true"
}

// Option configures an interceptor; each says which side it applies to,
// the other ignores it.
type Option func(*options)

type options struct {
	skip        func(ctx context.Context, fullMethod string) bool
	storable    func(codes.Code) bool
	maxAttempts int
	baseDelay   time.Duration
	maxDelay    time.Duration
	keyName     string

	// Test hooks of the client.
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
	randN func(int64) int64
}

func newOptions(opts []Option) *options {
	o := &options{
		storable:    DefaultStorable,
		maxAttempts: DefaultMaxAttempts,
		baseDelay:   DefaultBaseDelay,
		maxDelay:    DefaultMaxDelay,
		keyName:     KeyMetadata,
		now:         time.Now,
		sleep:       sleep,
		randN:       randN,
	}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// WithSkip leaves the unary calls for which skip returns true untouched:
// the server runs them unprotected, the client sends them without a key
// and does not retry them. Both sides. Default: every unary call is covered.
func WithSkip(skip func(ctx context.Context, fullMethod string) bool) Option {
	return func(o *options) { o.skip = skip }
}

// WithStorable sets the server's store policy: a reply whose code it
// accepts is stored and replayed; otherwise the key is released. Server
// only. Default: DefaultStorable.
func WithStorable(storable func(codes.Code) bool) Option {
	return func(o *options) {
		if storable != nil {
			o.storable = storable
		}
	}
}

// WithMaxAttempts bounds the calls the client makes, the first included;
// 1 (or less) never retries. Client only. Default: DefaultMaxAttempts.
func WithMaxAttempts(n int) Option {
	return func(o *options) { o.maxAttempts = max(n, 1) }
}

// WithKeyMetadata names the metadata the client sends its keys in, for a
// server whose core.Config.KeyHeader is not Idempotency-Key (it reads the
// key from that name lower-cased, as gRPC metadata names are; a key sent
// under another name is no key, and a server with optional keys runs the
// call unprotected). Client only. Default: KeyMetadata.
func WithKeyMetadata(name string) Option {
	return func(o *options) {
		if name != "" {
			o.keyName = strings.ToLower(name)
		}
	}
}

// WithBackoff sets the client's wait before the first retry, doubled for
// each next one, and the cap of any wait, the server's RetryInfo included;
// zero or less means the default (idemclient.Transport's zero does the
// same). Client only.
// Default: DefaultBaseDelay, DefaultMaxDelay.
func WithBackoff(base, maxDelay time.Duration) Option {
	return func(o *options) {
		o.baseDelay, o.maxDelay = cmp.Or(max(base, 0), DefaultBaseDelay), cmp.Or(max(maxDelay, 0), DefaultMaxDelay)
	}
}
