package grpcidem

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idem-go/idem/core"
)

// UnaryClientInterceptor returns the interceptor that sends every covered
// unary call with an idempotency key in KeyMetadata (or WithKeyMetadata's
// name) unless the outgoing metadata holds one (under that name or
// LegacyKeyMetadata): inside work that
// runs under a key of idem's, core.DerivedKey of the connection's target
// and the full method, the same on every run of the work; otherwise a fresh
// UUIDv4. Two calls of one method from one run share that key: give each
// its own (core.DerivedKey with a label of yours).
//
// It makes the call again with the same key when it fails with Unavailable
// or Aborted, or with ResourceExhausted that carries an errdetails.RetryInfo
// of at most the maximum delay (a scope over core.Config.Quota; other
// exhaustion, such as a message too large, has none): up to DefaultMaxAttempts calls in all, waiting 100 ms, 200 ms,
// 400 ms (±25 %) or the server's errdetails.RetryInfo, whichever is longer,
// and never past the call's deadline: when the next wait would end after
// it, the last error is returned at once. Other errors are returned as
// they are. A key whose server crashed in the middle of its call stays in
// flight until that server's lock expires (up to core.Config.LockTTL, 5
// minutes by default), longer than the default attempts last: the Aborted
// is then returned; to make the call again later as the same one, put a
// key of your own in the outgoing metadata.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	o := newOptions(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if o.skip != nil && o.skip(ctx, method) {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		if md, _ := metadata.FromOutgoingContext(ctx); md.Get(o.keyName) == nil && md.Get(LegacyKeyMetadata) == nil {
			target := ""
			if cc != nil {
				target = cc.Target()
			}
			key, ok := core.DerivedKey(ctx, target+method)
			if !ok {
				u, err := uuid.NewRandom()
				if err != nil {
					return fmt.Errorf("grpcidem: new key: %w", err)
				}
				key = u.String()
			}
			ctx = metadata.AppendToOutgoingContext(ctx, o.keyName, key)
		}
		for attempt := 1; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if err == nil || attempt >= o.maxAttempts || ctx.Err() != nil {
				return err
			}
			st := status.Convert(err)
			if !retryable(st, o.maxDelay) {
				return err
			}
			wait := o.delay(attempt, st)
			if deadline, ok := ctx.Deadline(); ok && o.now().Add(wait).After(deadline) {
				return err
			}
			if serr := o.sleep(ctx, wait); serr != nil {
				return status.FromContextError(serr).Err()
			}
		}
	}
}

// retryable reports whether a call that failed with st may be made again
// with its key: a ResourceExhausted only if its RetryInfo asks for no longer
// than maxDelay (a quota's window may be a minute away: retrying sooner
// would only be refused again).
func retryable(st *status.Status, maxDelay time.Duration) bool {
	switch st.Code() {
	case codes.Unavailable, codes.Aborted:
		return true
	case codes.ResourceExhausted:
		for _, det := range st.Details() {
			if ri, ok := det.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration() <= maxDelay
			}
		}
	}
	return false
}

// delay is the wait after the attempt-th call failed with st: the backoff
// with jitter or the server's RetryInfo, whichever is longer, at most
// maxDelay.
func (o *options) delay(attempt int, st *status.Status) time.Duration {
	d := o.baseDelay
	for i := 1; i < attempt && d < o.maxDelay; i++ {
		d *= 2
	}
	d = min(d, o.maxDelay)
	if q := int64(d) / 4; q > 0 {
		d += time.Duration(o.randN(2*q+1) - q)
	}
	for _, det := range st.Details() {
		if ri, ok := det.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > d {
			d = ri.GetRetryDelay().AsDuration()
		}
	}
	return min(d, o.maxDelay)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func randN(n int64) int64 { return rand.Int64N(n) }
