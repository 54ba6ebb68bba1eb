package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HeaderGetter reads request headers; http.Header implements it.
type HeaderGetter interface {
	// Get returns the first value of the named header, or "".
	Get(name string) string
	// Values returns every value of the named header, nil if absent; it
	// tells an empty key from a missing one, and a repeated key header.
	Values(name string) []string
}

// Request is the Engine's framework-neutral view of an HTTP request. An
// adapter fills it from its framework's request.
type Request struct {
	// Context carries the request's deadline and values (for Scope).
	Context context.Context
	Method  string
	// Route is the route template (/orders/{id}): the endpoint that
	// Config.ScopeRoute joins to the scope, and Event.Route, a label for
	// metrics that path parameters do not multiply. Empty means Path.
	Route string
	// Path is the request's path, escaped as sent (url.URL.EscapedPath):
	// routers that route on the escaped path send /docs/a%2Fb and /docs/a/b
	// to two handlers. It joins the fingerprint: one key sent to /orders/1
	// and then to /orders/2 is a key reused (422), not a replay of the first
	// order's response.
	Path string
	// Query is the raw query string (without "?"): it joins the fingerprint,
	// parameters sorted, so ?amount=1 and ?amount=1000 are two requests.
	Query  string
	Header HeaderGetter
	// Body is read only when the request carries a key; the adapter then
	// gives the handler Flight.Body instead. Nil means no body.
	Body io.Reader
	// ContentLength is the declared body size, or -1 if unknown. A body
	// declared larger than Config.MaxBodyBytes is refused without reading;
	// one that reads nothing while ContentLength promises bytes (and no
	// Content-Encoding is sent) is refused as read before the middleware
	// (ProblemBodyConsumed).
	ContentLength int64
	// ResponseHeader holds the response headers already set when the
	// middleware runs, by middleware before it (CORS, request ids, tracing).
	// Those that the handler leaves as they are are not stored, so that a
	// replay carries the values its own request got. Nil means none.
	ResponseHeader http.Header
}

// Engine decides, for each request, whether to run the handler, replay a
// stored response or refuse. It is safe for concurrent use; build one with
// New and share it between all the routes that need it. The zero Engine
// covers no method: it protects nothing.
type Engine struct {
	cfg    Config
	denied map[string]bool // canonical names of Config.DeniedHeaders
	retry  string          // Retry-After, in seconds
}

// initialBodyBuffer bounds the buffer allocated for a request body before
// its bytes arrive.
const initialBodyBuffer = 64 << 10

// Wait mode without a core.Waiter polls Acquire with exponential backoff.
const (
	firstWaitStep = 10 * time.Millisecond
	maxWaitStep   = 250 * time.Millisecond
)

// New returns an Engine for cfg; zero fields of cfg take their defaults.
func New(cfg Config) (*Engine, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cfg.cloneSlices() // the Engine's own: a caller's later change cannot race a request
	e := &Engine{
		cfg:    cfg,
		denied: make(map[string]bool, len(cfg.DeniedHeaders)),
		retry:  strconv.Itoa(int((cfg.RetryAfter + time.Second - 1) / time.Second)),
	}
	for _, h := range cfg.DeniedHeaders {
		e.denied[http.CanonicalHeaderKey(h)] = true
	}
	return e, nil
}

// Config returns the Engine's configuration with its defaults filled in,
// for adapters and the OpenAPI emitter (which documents MaxKeyLength,
// Required and Methods). New takes it back as it is: an Engine that accepts
// no legacy key header reports LegacyKeyHeader "-".
func (e *Engine) Config() Config {
	cfg := e.cfg
	cfg.cloneSlices()
	if cfg.LegacyKeyHeader == "" {
		cfg.LegacyKeyHeader = "-"
	}
	return cfg
}

// Covers reports whether requests with this method are covered.
func (e *Engine) Covers(method string) bool {
	for _, m := range e.cfg.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// Keyed reports whether Begin acts on a request with this method and these
// headers: the method is covered, and the request carries a key header
// (KeyHeader or LegacyKeyHeader, even an empty one) or keys are Required.
// It only asks whether h.Values is nil, and allocates nothing (the header
// names are canonical), so that an adapter can pass the other requests on
// before it sets anything up for Begin.
func (e *Engine) Keyed(method string, h HeaderGetter) bool {
	return e.Covers(method) && (e.cfg.Required || h.Values(e.cfg.KeyHeader) != nil ||
		e.cfg.LegacyKeyHeader != "" && h.Values(e.cfg.LegacyKeyHeader) != nil)
}

// Begin decides what to do with req. It returns:
//
//   - nil, nil: the request is not covered (its method, or no key while keys
//     are optional): run the handler as usual; the body was not read;
//   - nil, a Response: write it (a replay or an error); do not run the handler;
//   - a Flight, nil: run the handler with Flight.Body as the request body,
//     feed the response body to Flight.Write, then call Flight.Complete, or
//     Flight.Abort if the response must not be stored (a panic, a hijacked
//     connection, a body the adapter cannot capture).
//
// Begin may block up to Config.Wait when the key is in flight.
func (e *Engine) Begin(req *Request) (*Flight, *Response) {
	if !e.Covers(req.Method) {
		return nil, nil
	}
	key, present, err := e.key(req.Header)
	if !present && !e.cfg.Required {
		return nil, nil // the common unprotected case costs no more than this
	}
	start := time.Now()
	route := req.Route
	if route == "" {
		route = req.Path
	}
	ev := Event{Method: req.Method, Route: route, Key: key}
	fail := func(o Outcome, p *Problem, err error) (*Flight, *Response) {
		ev.Outcome, ev.Status, ev.Err = o, p.Status, err
		e.observe(ev, start)
		return nil, problemResponse(p, nil)
	}
	switch {
	case err != nil:
		return fail(OutcomeInvalidKey, &Problem{Type: ProblemInvalidKey, Title: "Invalid idempotency key",
			Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), ErrInvalidKey.Error()+": ")}, err)
	case !present:
		return fail(OutcomeInvalidKey, &Problem{Type: ProblemMissingKey, Title: "Missing idempotency key",
			Status: http.StatusBadRequest, Detail: "this request requires an " + e.cfg.KeyHeader + " header"}, nil)
	}

	body, err := e.readBody(req)
	if err != nil {
		var maxBytes *http.MaxBytesError // an http.MaxBytesReader around the body
		if errors.Is(err, errBodyTooLarge) || errors.As(err, &maxBytes) {
			return fail(OutcomeTooLarge, &Problem{Type: ProblemBodyTooLarge, Title: "Request body too large",
				Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("a request with an idempotency key may have at most %d bytes of body", e.cfg.MaxBodyBytes)}, err)
		}
		if errors.Is(err, errBodyConsumed) {
			return fail(OutcomeBadBody, &Problem{Type: ProblemBodyConsumed, Title: "Request body already read",
				Status: http.StatusInternalServerError, Detail: "the server read the request body before the idempotency middleware"}, err)
		}
		// The client went away or sent a broken body: nothing to protect.
		return fail(OutcomeBadBody, &Problem{Type: ProblemUnreadableBody, Title: "Unreadable request body",
			Status: http.StatusBadRequest, Detail: err.Error()}, err)
	}

	if e.cfg.Scope != nil {
		ev.Scope = e.cfg.Scope(req)
	}
	ctx := req.Context
	if ctx == nil {
		ctx = context.Background()
	}
	f := &Flight{
		e:           e,
		ctx:         context.WithoutCancel(ctx),
		ev:          ev,
		start:       start,
		body:        body,
		id:          e.id(ev.Scope, key, route),
		fingerprint: fingerprint(req.Method, req.Path, req.Query, req.Header.Get("Content-Type"), body, e.cfg.CriticalHeaders, req.Header),
		ttl:         e.cfg.ResponseTTL,
	}
	if e.cfg.TTL != nil {
		if ttl := e.cfg.TTL(req); ttl > 0 {
			f.ttl = ttl
		}
	}
	if len(req.ResponseHeader) > 0 {
		f.base = req.ResponseHeader.Clone()
	}
	return e.acquire(ctx, f)
}

// acquire takes the lock of f, replays, or refuses, waiting for an in-flight
// key when Config.Wait allows.
func (e *Engine) acquire(ctx context.Context, f *Flight) (*Flight, *Response) {
	var deadline time.Time
	if e.cfg.Wait > 0 {
		deadline = f.start.Add(e.cfg.Wait)
	}
	step := firstWaitStep
	var (
		inFlight bool  // the key was seen in flight
		waitErr  error // a store error met since
		last     bool  // the wait is over: this was the last look
	)
	for {
		// Not cancelled with the request: a store call cut off half-way may
		// have taken the lock all the same (Redis ran the script, the reply
		// was lost), leaving a lock nobody releases before it expires.
		sent := time.Now() // the lock's TTL runs from about then
		raw, token, err := e.cfg.Store.Acquire(f.ctx, f.id, e.cfg.LockTTL)
		switch {
		case err == nil && token != "":
			f.token = token
			f.startRefresh(sent)
			return f, nil
		case err == nil:
			return e.replay(f, raw)
		case errors.Is(err, ErrInFlight):
			inFlight = true
		case !inFlight:
			return e.storeFailed(f, err)
		default:
			// The key was in flight a moment ago and may still be: running
			// the handler unprotected now could run it twice, whatever
			// FailClosed says. Keep waiting; at the deadline, 409.
			waitErr = err
		}
		if e.cfg.Wait > 0 && !last && ctx.Err() == nil {
			if time.Now().Before(deadline) && e.wait(ctx, f.id, deadline, step) == nil {
				step = min(2*step, maxWaitStep)
				continue
			}
			// The deadline cut the last backoff step short: look once
			// more, the first request may have finished meanwhile.
			if last = ctx.Err() == nil; last {
				continue
			}
		}
		f.ev.Err = waitErr
		f.ev.Outcome, f.ev.Status = OutcomeConflict, http.StatusConflict
		e.observe(f.ev, f.start)
		h := make(http.Header, 2)
		h.Set("Retry-After", e.retry)
		return nil, problemResponse(&Problem{Type: ProblemKeyInFlight, Title: "Request in flight",
			Status: http.StatusConflict,
			Detail: "a request with this idempotency key is being processed; retry later"}, h)
	}
}

// wait blocks until the lock of id may have been released: through the
// store's Waiter if it has one, else by sleeping step (the caller backs off).
func (e *Engine) wait(ctx context.Context, id string, deadline time.Time, step time.Duration) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if w, ok := e.cfg.Store.(Waiter); ok {
		return w.Wait(ctx, id)
	}
	t := time.NewTimer(step)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) replay(f *Flight, raw []byte) (*Flight, *Response) {
	var rec Record
	if err := rec.UnmarshalBinary(raw); err != nil {
		return e.storeFailed(f, err)
	}
	if rec.Fingerprint != f.fingerprint {
		f.ev.Outcome, f.ev.Status = OutcomeMismatch, http.StatusUnprocessableEntity
		e.observe(f.ev, f.start)
		return nil, problemResponse(&Problem{Type: ProblemKeyReused, Title: "Idempotency key reused",
			Status: http.StatusUnprocessableEntity,
			Detail: "this idempotency key was already used with a different request"}, nil)
	}
	h := rec.Header
	if h == nil {
		h = make(http.Header, 2)
	}
	h[HeaderReplay] = []string{"true"}
	if e.cfg.ReplayTimestamp {
		h[HeaderOriginalTimestamp] = []string{rec.RequestedAt.UTC().Format(time.RFC3339)}
	}
	if rec.BodyOmitted {
		h[HeaderBodyOmitted] = []string{"sha256=" + hex.EncodeToString(rec.BodySHA256[:]) + "; size=" + strconv.FormatInt(rec.BodySize, 10)}
	}
	f.ev.Outcome, f.ev.Status = OutcomeReplay, rec.StatusCode
	e.observe(f.ev, f.start)
	return nil, &Response{StatusCode: rec.StatusCode, Header: h, Body: rec.Body}
}

// storeFailed applies the fail-open or fail-closed policy.
func (e *Engine) storeFailed(f *Flight, err error) (*Flight, *Response) {
	f.ev.Outcome, f.ev.Err = OutcomeStoreError, err
	if e.cfg.FailClosed {
		f.ev.Status = http.StatusServiceUnavailable
		e.observe(f.ev, f.start)
		h := make(http.Header, 2)
		h.Set("Retry-After", e.retry)
		return nil, problemResponse(&Problem{Type: ProblemStoreUnavailable, Title: "Idempotency store unavailable",
			Status: http.StatusServiceUnavailable,
			Detail: "the request was not run because its idempotency cannot be guaranteed; retry later"}, h)
	}
	e.observe(f.ev, f.start)
	f.done = true // unprotected: Complete and Abort do nothing
	return f, nil
}

func (e *Engine) observe(ev Event, start time.Time) {
	if e.cfg.Observer != nil {
		ev.Duration = time.Since(start)
		e.cfg.Observer(ev)
	}
}

var (
	errBodyTooLarge = errors.New("idem: request body too large")
	// errBodyConsumed reports a body that ended before its first byte while
	// its Content-Length promised more: something before the middleware
	// read it (net/http reports a body cut short by the client as
	// io.ErrUnexpectedEOF). Fingerprinting it as empty would give one
	// request another's replay. A Content-Encoding exempts it: a
	// decompressing middleware keeps the compressed length.
	errBodyConsumed = errors.New("idem: the request body was read before the middleware")
)

func (e *Engine) readBody(req *Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	limit := e.cfg.MaxBodyBytes
	if req.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	// Up to initialBodyBuffer at first, then doubling as the bytes arrive,
	// up to the declared length: a client that declares a large body and
	// sends it slowly holds at most twice what it sent. The buffer holds one
	// byte more than the body, to read its EOF, or, past the limit, to tell
	// "exactly the limit" from "over it".
	want := min(req.ContentLength, limit) + 1 // the declared body and its EOF, or 0 if undeclared
	buf := make([]byte, 0, max(min(want, initialBodyBuffer), 512))
	for {
		if len(buf) == cap(buf) {
			ceiling := limit + 1
			if int64(len(buf)) < want {
				ceiling = want
			}
			next := 2 * int64(cap(buf))
			if next >= ceiling-1 {
				next = ceiling // not one byte short of it, which would cost a copy more
			}
			buf = append(make([]byte, 0, next), buf...)
		}
		n, err := req.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			if len(buf) == 0 && req.ContentLength > 0 && req.Header.Get("Content-Encoding") == "" {
				return nil, errBodyConsumed
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// key returns the request's key: from KeyHeader or LegacyKeyHeader (which
// must agree, once unquoted, when both are sent), unquoted and validated.
func (e *Engine) key(h HeaderGetter) (key string, present bool, err error) {
	name, values := e.cfg.KeyHeader, h.Values(e.cfg.KeyHeader)
	var legacy []string
	if e.cfg.LegacyKeyHeader != "" {
		legacy = h.Values(e.cfg.LegacyKeyHeader)
	}
	if values == nil {
		name, values, legacy = e.cfg.LegacyKeyHeader, legacy, nil
	}
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fmt.Errorf("%w: %d %s headers, want one", ErrInvalidKey, len(values), name)
	}
	raw := values[0]
	key, err = parseKey(raw, e.cfg.MaxKeyLength)
	if err == nil && legacy != nil {
		if other, err := parseKey(legacy[0], e.cfg.MaxKeyLength); len(legacy) != 1 || err != nil || other != key {
			return raw, true, fmt.Errorf("%w: %s and %s differ", ErrInvalidKey, e.cfg.KeyHeader, e.cfg.LegacyKeyHeader)
		}
	}
	if err == nil && e.cfg.ValidateKey != nil {
		err = e.cfg.ValidateKey(key)
	}
	if err != nil {
		return raw, true, fmt.Errorf("%w: %w", ErrInvalidKey, err) // the validator's error stays reachable with errors.Is and errors.As
	}
	return key, true, nil
}

// id is the store key of (scope, key[, route]): the hex SHA-256 of the
// length-prefixed parts, so no key, whatever it holds, can reach another
// scope's record or break a store's key layout.
func (e *Engine) id(scope, key, route string) string {
	var buf [512]byte
	b := appendField(buf[:0], scope)
	b = appendField(b, key)
	if e.cfg.ScopeRoute {
		b = appendField(b, route)
	}
	sum := sha256.Sum256(b)
	var out [64]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// Flight is a request that holds its key's lock while the handler runs.
// The adapter feeds it the response (Write, then Complete) or drops it
// (Abort). Complete and Abort may be called more than once and in any
// order: only the first call counts, so `defer f.Abort()` covers a panic.
type Flight struct {
	e           *Engine
	ctx         context.Context // the request's values, never cancelled
	ev          Event
	start       time.Time
	body        []byte
	id          string
	token       string
	fingerprint [32]byte
	ttl         time.Duration
	base        http.Header // response headers set before the handler ran

	// the captured response body, or its hash once it outgrew the limit
	resp   []byte
	size   int64
	hasher hash.Hash

	mu      sync.Mutex // guards done, held, expired and timer against the refresher
	done    bool
	held    time.Time // when the lock was last known held for LockTTL: taken or refreshed
	expired bool      // a refresh found the lock gone
	timer   *time.Timer
}

// Body returns the request body that Begin read, for the handler.
func (f *Flight) Body() []byte { return f.body }

// Write records p as part of the response body. It never fails.
func (f *Flight) Write(p []byte) (int, error) {
	f.size += int64(len(p))
	switch {
	case f.hasher != nil:
		f.hasher.Write(p)
	case len(f.resp)+len(p) > f.e.cfg.MaxStoredBodyBytes:
		f.hasher = sha256.New()
		f.hasher.Write(f.resp)
		f.hasher.Write(p)
		f.resp = nil
	default:
		f.resp = append(f.resp, p...)
	}
	return len(p), nil
}

// Complete ends the flight with the handler's status and response headers
// (the body went through Write): the response is stored, less the denied
// headers and those left as Request.ResponseHeader had them, and the lock
// released, or, if the store policy refuses the status, the lock is
// released without storing. If the store fails to take the response, the
// lock is left to expire: the handler ran, and a retry must not run it
// again before LockTTL.
func (f *Flight) Complete(status int, header http.Header) {
	// Storable runs first: if it panics, the flight is not over yet and the
	// adapter's deferred Abort releases the lock.
	storable := status >= 200 && status <= 999 && f.e.cfg.Storable(status)
	if !f.finish() {
		return
	}
	f.mu.Lock()
	// Expired: a refresh found the lock gone, or none succeeded for LockTTL
	// (they failed with other errors).
	expired := f.expired || time.Since(f.held) >= f.e.cfg.LockTTL
	f.mu.Unlock()
	f.ev.Status = status
	if !storable {
		f.release(nil)
		return
	}
	now := time.Now()
	rec := Record{
		Key:         f.ev.Key,
		Scope:       f.ev.Scope,
		Fingerprint: f.fingerprint,
		StatusCode:  status,
		Header:      make(http.Header, len(header)),
		Body:        f.resp,
		RequestedAt: f.start,
		CompletedAt: now,
		ExpiresAt:   now.Add(f.ttl),
	}
	for k, v := range header {
		if !f.e.denied[http.CanonicalHeaderKey(k)] && !slices.Equal(v, f.base[k]) {
			rec.Header[k] = v
		}
	}
	if f.hasher != nil {
		rec.BodyOmitted, rec.BodySize = true, f.size
		f.hasher.Sum(rec.BodySHA256[:0])
	}
	data, _ := rec.AppendBinary(make([]byte, 0, 128+len(f.resp)))
	ctx, cancel := f.storeContext()
	defer cancel()
	err := f.e.cfg.Store.Complete(ctx, f.id, f.token, data, f.ttl)
	switch {
	case err == nil && expired:
		// Stored late: the lock expired, or may have (no refresh confirmed
		// it), and nobody took the key; but for a while a duplicate could
		// have run the handler.
		f.ev.Outcome, f.ev.Err = OutcomeStored, errStoredLate
	case err == nil:
		f.ev.Outcome = OutcomeStored
	case errors.Is(err, ErrLockLost):
		f.ev.Outcome, f.ev.Err = OutcomeLockLost, err
	default:
		// Not stored, or not known to be (a timeout may hide a success).
		// The handler ran: the lock is left to expire, so that a retry gets
		// 409 until LockTTL has passed rather than run the handler again now.
		f.ev.Outcome, f.ev.Err = OutcomeStoreError, err
	}
	f.e.observe(f.ev, f.start)
}

// storeContext bounds a store call made after the handler: the request's
// values, no cancellation (the client may be gone, the lock must still be
// settled), and at most LockTTL, past which the lock is gone anyway.
func (f *Flight) storeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(f.ctx, f.e.cfg.LockTTL)
}

// Abort ends the flight without storing: the lock is released so a retry
// runs the handler again. Use it after a panic, for a hijacked connection,
// a body the adapter cannot capture (Fiber's body stream), or a response
// that is not the handler's (a router's 404).
func (f *Flight) Abort() {
	if f.finish() {
		f.release(errAborted)
	}
}

// errStoredLate is the Err of an OutcomeStored event whose lock expired,
// or may have, while the handler ran.
var errStoredLate = fmt.Errorf("%w (or may have been: no refresh confirmed the lock for LockTTL) while the handler ran; the response was stored as no other request had taken the key", ErrLockLost)

var errAborted = errors.New("idem: flight aborted: response not stored (panic, hijack, body stream or not the handler's)")

func (f *Flight) release(reason error) {
	ctx, cancel := f.storeContext()
	defer cancel()
	err := f.e.cfg.Store.Release(ctx, f.id, f.token)
	f.ev.Outcome, f.ev.Err = OutcomeNotStored, reason
	switch {
	case errors.Is(err, ErrLockLost):
		f.ev.Outcome, f.ev.Err = OutcomeLockLost, err
	case err != nil:
		f.ev.Outcome, f.ev.Err = OutcomeStoreError, err
	}
	f.e.observe(f.ev, f.start)
}

// finish marks the flight done and stops the refresher; it reports whether
// this call was the first.
func (f *Flight) finish() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return false
	}
	f.done = true
	if f.timer != nil {
		f.timer.Stop()
	}
	return true
}

// startRefresh arms a timer that extends the lock every LockTTL/3 while the
// handler runs, so that a slow handler keeps its lock and is never run twice.
func (f *Flight) startRefresh(taken time.Time) {
	f.mu.Lock()
	f.held = taken
	f.timer = time.AfterFunc(f.e.cfg.LockTTL/3, f.refresh)
	f.mu.Unlock()
}

// storeRefresh calls Store.Refresh, turning a panic of the store into an
// error: it runs on a timer's goroutine, where a panic would end the
// process rather than one request.
func (f *Flight) storeRefresh(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("idem: Store.Refresh panicked: %v", r)
		}
	}()
	return f.e.cfg.Store.Refresh(ctx, f.id, f.token, f.e.cfg.LockTTL)
}

func (f *Flight) refresh() {
	f.mu.Lock()
	done := f.done
	f.mu.Unlock()
	if done {
		return
	}
	// The store call runs without the mutex, so that Complete and Abort
	// never wait for a slow refresh; its result is ignored if the flight
	// ended meanwhile. Half the period, so that a refresh that times out
	// leaves time for another before the lock expires.
	// Its context carries none of the request's values: the call may
	// outlast the request, whose context a framework reuses once the
	// adapter returns.
	period := f.e.cfg.LockTTL / 3
	ctx, cancel := context.WithTimeout(context.Background(), period/2)
	sent := time.Now()
	err := f.storeRefresh(ctx)
	cancel()

	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err == nil:
		f.held = sent
	case errors.Is(err, ErrLockLost):
		f.expired = true
	}
	if f.done || f.expired {
		// No use refreshing a lock someone else may hold. The loss is
		// reported once, by Complete or Abort, whose store call finds it.
		return
	}
	// On another error, try again at the next tick: the lock is still ours
	// until it expires.
	f.timer.Reset(period)
}
