// Package idemclient is a retrying HTTP client for APIs that take an
// Idempotency-Key header, such as one served by idem's core.Engine.
//
// Transport is an http.RoundTripper. A request whose method it covers (POST,
// PUT, PATCH, DELETE by default) gets a key unless it carries one: inside
// work that runs under a key of idem's (a handler, core.Do), the key
// core.DerivedKey gives for its method, host and path, so that a run again
// of the work sends the same key; otherwise a fresh UUIDv4. The request is
// sent again with that same key and the same body after a network error (not
// net/http's refusal of a request it cannot send, such as a bad header, nor
// an error reading the body), a 409 that says the key is in flight (idem's
// problem type key-in-flight of [docs/problems.md], under any
// Config.ProblemDocsURL, or a Retry-After), a 429 or a 5xx but 501: up to
// MaxAttempts in all, waiting 100 ms, 200 ms, 400 ms (±25 %) or the
// response's Retry-After, whichever is longer, and never past the request context's deadline; a 429 or 503 whose
// Retry-After is over MaxDelay, and a replay (the server's stored answer,
// such as an application's own 409 with Retry-After), are returned at once.
// Any other status, such as an application's own 409, is returned as it
// is. Replayed and Attempts tell how the final response came. Beneath it,
// net/http's own Transport also resends once, uncounted, a request with an
// Idempotency-Key whose reused connection broke before any answer (a
// server that closed it, as net/http's does after a handler's panic).
//
// The attempts are over in a few seconds with the defaults, while a key
// whose server crashed in the middle of its request stays in flight until
// that server's lock expires (up to core.Config.LockTTL, 5 minutes by
// default): the last 409 is then returned. To send the request again
// later as the same one, give it a key of your own.
//
// Work that sends two requests of one method to one host and path must
// give each its own key, such as core.DerivedKey(ctx, "refund 2") in the
// Idempotency-Key header: they would share one. See Example.
//
// [docs/problems.md]: https://github.com/idem-go/idem/blob/main/docs/problems.md
package idemclient

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/idem-go/idem/core"
)

// Defaults of Transport's fields.
const (
	DefaultKeyHeader      = "Idempotency-Key"
	DefaultReplayHeader   = "X-Idempotency-Replay"
	DefaultMaxAttempts    = 4
	DefaultBaseDelay      = 100 * time.Millisecond
	DefaultMaxDelay       = 5 * time.Second
	DefaultMaxBufferBytes = 1 << 20
)

// legacyKeyHeader is the older key header idem's servers also accept; a
// request carrying it already has a key.
const legacyKeyHeader = "X-Idempotency-Key"

// drainBytes bounds what is read from a failed attempt's body before closing
// it, so that its connection can be reused.
const drainBytes = 4 << 10

// ErrConfig reports a Transport field out of range (a negative number, a
// method in Methods that is not upper-case), for every request.
var ErrConfig = errors.New("idemclient: invalid Transport")

// Transport sends covered requests with an idempotency key and retries them.
// The zero value is ready to use; a Transport is safe for concurrent use and
// must not be changed while in use.
type Transport struct {
	// Base sends each attempt. Optional. Default: http.DefaultTransport.
	Base http.RoundTripper
	// Methods get a key and are retried, each written upper-case as HTTP
	// methods are (RoundTrip refuses "post"). Optional. Default: POST, PUT,
	// PATCH, DELETE.
	Methods []string
	// RetrySafe retries GET, HEAD, OPTIONS and TRACE too, without adding a
	// key: they are safe by definition. Optional. Default: false, they and
	// any other method not in Methods pass through untouched.
	RetrySafe bool
	// KeyHeader carries the key. A request with this header or
	// X-Idempotency-Key keeps its own. Optional. Default: DefaultKeyHeader.
	KeyHeader string
	// ReplayHeader marks a replayed response with "true", for Replayed.
	// Optional. Default: DefaultReplayHeader.
	ReplayHeader string
	// MaxAttempts bounds the requests sent, the first included; 1 never
	// retries. Optional. Default: DefaultMaxAttempts.
	MaxAttempts int
	// BaseDelay is the wait before the first retry, doubled for each next
	// one. Optional. Default: DefaultBaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps any one wait, Retry-After included; but a 429 or 503
	// whose Retry-After asks for longer is not retried: it is returned as
	// is, for the caller to wait as the server asks. Optional. Default:
	// DefaultMaxDelay.
	MaxDelay time.Duration
	// MaxBufferBytes bounds the body kept for a request without GetBody; a
	// longer one is sent once, never retried. Optional. Default: DefaultMaxBufferBytes.
	MaxBufferBytes int64

	// Test hooks; nil means the real clock, sleep and random source.
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
	randN func(int64) int64
}

// CloseIdleConnections closes the idle connections of Base, or of
// http.DefaultTransport, if it has such a method, so that
// http.Client.CloseIdleConnections reaches them through the Transport.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// settings are a Transport's fields with the defaults filled in.
type settings struct {
	keyHeader, replayHeader string
	maxAttempts             int
	baseDelay, maxDelay     time.Duration
	maxBuffer               int64
}

func (t *Transport) settings() (settings, error) {
	s := settings{
		keyHeader:    cmp.Or(t.KeyHeader, DefaultKeyHeader),
		replayHeader: cmp.Or(t.ReplayHeader, DefaultReplayHeader),
		maxAttempts:  cmp.Or(t.MaxAttempts, DefaultMaxAttempts),
		baseDelay:    cmp.Or(t.BaseDelay, DefaultBaseDelay),
		maxDelay:     cmp.Or(t.MaxDelay, DefaultMaxDelay),
		maxBuffer:    cmp.Or(t.MaxBufferBytes, DefaultMaxBufferBytes),
	}
	if s.maxAttempts < 0 || s.baseDelay < 0 || s.maxDelay < 0 || s.maxBuffer < 0 {
		return s, fmt.Errorf("%w: negative MaxAttempts, BaseDelay, MaxDelay or MaxBufferBytes", ErrConfig)
	}
	for _, m := range t.Methods {
		// Methods are case-sensitive: "post" (from a config file) would
		// leave every POST without a key and never retried, silently.
		if m == "" || m != strings.ToUpper(m) {
			return s, fmt.Errorf("%w: method %q in Methods is not upper-case", ErrConfig, m)
		}
	}
	return s, nil
}

func (t *Transport) covered(method string) (keyed, retried bool) {
	if method == "" {
		method = http.MethodGet
	}
	if t.Methods == nil {
		switch method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			return true, true
		}
	}
	for _, m := range t.Methods {
		if m == method {
			return true, true
		}
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false, t.RetrySafe
	}
	return false, false
}

// outcome is how a Transport got a response; the attempt requests' context
// carries it, so Replayed and Attempts find it through resp.Request.
type outcome struct {
	attempts int
	replayed bool
}

type outcomeKey struct{}

func outcomeOf(resp *http.Response) *outcome {
	if resp == nil || resp.Request == nil {
		return nil
	}
	o, _ := resp.Request.Context().Value(outcomeKey{}).(*outcome)
	return o
}

// Replayed reports whether resp is a response the server replayed from its
// store (the Transport's ReplayHeader, or DefaultReplayHeader for a response
// that did not come through a Transport, is "true").
func Replayed(resp *http.Response) bool {
	if o := outcomeOf(resp); o != nil {
		return o.replayed
	}
	return resp != nil && resp.Header.Get(DefaultReplayHeader) == "true"
}

// Attempts returns how many requests a Transport sent to get resp, or 0 if
// its method passed through untouched. Like Replayed, it reads the context of
// resp.Request: the last attempt's request, which also carries the key sent
// (a Base that sets resp.Request must derive it from the request it got).
func Attempts(resp *http.Response) int {
	if o := outcomeOf(resp); o != nil {
		return o.attempts
	}
	return 0
}

// RoundTrip implements http.RoundTripper. It never changes req: every
// attempt is a clone. The final response is returned whatever its status;
// those of earlier attempts are drained and closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	s, err := t.settings() // first: a Methods of "post" covers no request
	if err != nil {
		closeBody(req)
		return nil, err
	}
	keyed, retried := t.covered(req.Method)
	if !retried {
		return base.RoundTrip(req)
	}
	info := &outcome{}
	ctx := context.WithValue(req.Context(), outcomeKey{}, info)
	tmpl := req.Clone(ctx)
	if keyed && tmpl.Header.Get(s.keyHeader) == "" && tmpl.Header.Get(legacyKeyHeader) == "" {
		key, ok := core.DerivedKey(ctx, req.Method+" "+req.URL.Host+req.URL.EscapedPath())
		if !ok {
			u, err := uuid.NewRandom()
			if err != nil {
				closeBody(req)
				return nil, fmt.Errorf("idemclient: new key: %w", err)
			}
			key = u.String()
		}
		tmpl.Header.Set(s.keyHeader, key)
	}
	replay, err := replayBody(tmpl, s.maxBuffer)
	if err != nil {
		return nil, err
	}

	r := tmpl
	for {
		info.attempts++
		var body *callerBody
		if req.GetBody != nil && r.Body != nil && r.Body != http.NoBody {
			body = &callerBody{ReadCloser: r.Body}
			r.Body = body
		}
		resp, err := base.RoundTrip(r)
		if err == nil && resp.Request == nil {
			resp.Request = r
		}
		wait, again := t.retry(resp, err, s)
		if again && (info.attempts >= s.maxAttempts || replay == nil || ctx.Err() != nil || body.failed(err)) {
			again = false
		}
		if again {
			wait = max(wait, t.backoff(info.attempts, s))
			if deadline, ok := ctx.Deadline(); ok && !t.clock().Add(wait).Before(deadline) {
				again = false // no time left for another attempt: the last result stands
			}
		}
		if !again {
			if err != nil {
				if info.attempts > 1 {
					err = fmt.Errorf("idemclient: %d attempts: %w", info.attempts, err)
				}
				return nil, err
			}
			info.replayed = resp.Header.Get(s.replayHeader) == "true"
			return resp, nil
		}
		if resp != nil {
			io.CopyN(io.Discard, resp.Body, drainBytes) //nolint:errcheck // only to reuse the connection
			resp.Body.Close()
		}
		sleep := t.sleep
		if sleep == nil {
			sleep = sleepCtx
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("idemclient: waiting after %d attempts: %w", info.attempts, err)
		}
		next := *tmpl
		if next.Body, err = replay(); err != nil {
			return nil, fmt.Errorf("idemclient: body for attempt %d: %w", info.attempts+1, err)
		}
		r = &next
	}
}

// callerBody is an attempt's body from the caller's GetBody (or Body); it
// records a read error, which net/http returns as the attempt's own.
type callerBody struct {
	io.ReadCloser
	err atomic.Pointer[error]
}

func (b *callerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

// failed reports whether an attempt failed with the body's read error: a
// body given again would fail again.
func (b *callerBody) failed(err error) bool {
	if b == nil || err == nil {
		return false
	}
	e := b.err.Load()
	return e != nil && errors.Is(err, *e)
}

// replayBody sets up r's body for the first attempt and returns what gives
// the body of each next one, or nil if the body cannot be sent again.
func replayBody(r *http.Request, limit int64) (func() (io.ReadCloser, error), error) {
	switch {
	case r.Body == nil || r.Body == http.NoBody:
		body := r.Body
		return func() (io.ReadCloser, error) { return body, nil }, nil
	case r.GetBody != nil:
		return r.GetBody, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		r.Body.Close()
		return nil, fmt.Errorf("idemclient: reading request body: %w", err)
	}
	if int64(len(buf)) > limit {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return nil, nil
	}
	r.Body.Close()
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	r.Body, _ = r.GetBody()
	return r.GetBody, nil
}

// retry tells whether an attempt's result is worth another attempt, and the
// server's Retry-After if it sent one, at most MaxDelay; a 429 or 503 whose
// Retry-After is over MaxDelay is not, nor a replay: every retry with its
// key would get it again.
func (t *Transport) retry(resp *http.Response, err error, s settings) (time.Duration, bool) {
	if err != nil {
		var cert *tls.CertificateVerificationError
		return 0, !errors.As(err, &cert) && !refused(err)
	}
	if resp.Header.Get(s.replayHeader) == "true" {
		return 0, false
	}
	switch code := resp.StatusCode; {
	case code == http.StatusConflict && inFlight(resp), code == http.StatusTooManyRequests,
		code >= 500 && code < 600 && code != http.StatusNotImplemented:
		wait := retryAfter(resp.Header.Get("Retry-After"), t.clock())
		if wait > s.maxDelay && (code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) {
			return 0, false // a quota or an outage that long: retrying sooner would be refused again
		}
		return min(wait, s.maxDelay), true
	}
	return 0, false
}

// refusals are in the errors of net/http's Transport for a request it
// refuses before sending it; net/http exports no type for them.
var refusals = []string{
	"unsupported protocol scheme", "net/http: invalid header ", "net/http: invalid trailer ", "net/http: invalid method ",
	"http: no Host in request URL", "net/http: nil Request.",
}

// refused reports whether err is net/http's refusal of a request: a
// network error it is not, and every attempt would get it again.
func refused(err error) bool {
	for _, r := range refusals {
		if strings.Contains(err.Error(), r) {
			return true
		}
	}
	return false
}

// keyInFlight ends the type of idem's key-in-flight problem
// (docs/problems.md), whatever Config.ProblemDocsURL says.
const keyInFlight = "#key-in-flight"

// inFlight reports whether a 409 says that a request with the key is in
// flight: it carries Retry-After, or it is idem's problem of that type. It
// reads at most drainBytes of a problem's body, and leaves the body whole.
func inFlight(resp *http.Response) bool {
	if resp.Header.Get("Retry-After") != "" {
		return true
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/problem+json" {
		return false
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, drainBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	var p struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(head, &p) == nil && strings.HasSuffix(p.Type, keyInFlight)
}

// retryAfter parses a Retry-After value, seconds or an HTTP date; 0 if
// there is none or it does not parse.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(min(max(secs, 0), math.MaxInt64/int64(time.Second))) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0)
	}
	return 0
}

// backoff is the wait after the given attempt: BaseDelay doubled per attempt
// before it, ±25 %, at most MaxDelay.
func (t *Transport) backoff(attempt int, s settings) time.Duration {
	d := s.baseDelay
	for i := 1; i < attempt && d < s.maxDelay; i++ {
		d *= 2
	}
	d = min(d, s.maxDelay)
	if spread := int64(d / 2); spread > 0 {
		randN := t.randN
		if randN == nil {
			randN = rand.Int64N
		}
		d = d*3/4 + time.Duration(randN(spread))
	}
	return min(d, s.maxDelay)
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}
