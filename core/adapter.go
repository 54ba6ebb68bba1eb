package core

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/internal/clientgone"
	"github.com/idem-go/idem/internal/trailers"
)

// This file is the API of HTTP framework adapters (ginidem, echoidem,
// fiberidem): app authors do not need it.

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
	// metrics that path parameters do not multiply. Empty means unknown
	// (a request no route matched, a middleware that runs before the
	// router): Event.Route is then "unmatched", so that clients cannot add
	// label values, and ScopeRoute joins Path.
	Route string
	// Path is the request's path, escaped as sent (NewRequest: from
	// RequestURI, before any http.StripPrefix, in url.URL.EscapedPath's form):
	// routers that route on the escaped path send /docs/a%2Fb and /docs/a/b
	// to two handlers. It joins the fingerprint: one key sent to /orders/1
	// and then to /orders/2 is a key reused (422), not a replay of the first
	// order's response.
	Path string
	// Query is the raw query string (without "?"): it joins the fingerprint,
	// parameters sorted, so ?amount=1 and ?amount=1000 are two requests.
	Query string
	// Host is the host the router chose the handler by (a ServeMux
	// pattern's, Echo's e.Host), "" if it routes on the path alone. It
	// joins the fingerprint: one key sent to one path of two hosts that go
	// to two handlers is a key reused (422).
	Host   string
	Header HeaderGetter
	// routed is r.URL's escaped path when a handler before the middleware
	// changed it (NewRequest; rewritten): it joins the fingerprint beside
	// Path, so that a rewrite that routes on something else than the path
	// sent (a header, the query) still tells two requests apart.
	routed    string
	rewritten bool
	// Body is read only when the request carries a key; the adapter then
	// gives the handler Flight.Body instead. Nil means no body.
	Body io.Reader
	// ContentLength is the declared body size, or -1 if unknown. A body
	// declared larger than Config.MaxBodyBytes is refused without reading;
	// one that reads nothing while ContentLength promises bytes (and no
	// Content-Encoding is sent) is refused as read before the middleware
	// (500, problem body-consumed).
	ContentLength int64
	// ResponseHeader holds the response headers already set when the
	// middleware runs, by middleware before it (CORS, request ids, tracing).
	// Those that the handler leaves as they are are not stored, so that a
	// replay carries the values its own request got. Nil means none.
	ResponseHeader http.Header
}

// NewRequest returns the Engine's view of r for Begin. route is its route
// template ("" if unknown), w the response writer, whose headers so far are
// those of middleware before the adapter. Context is r's; an adapter may
// set another that adds its framework's values, for Config.Scope.
func NewRequest(r *http.Request, route string, w http.ResponseWriter) Request {
	path, routed, rewritten := requestPath(r)
	return Request{
		Context:        r.Context(),
		Method:         r.Method,
		Route:          route,
		Path:           path,
		routed:         routed,
		rewritten:      rewritten,
		Query:          r.URL.RawQuery,
		Header:         r.Header,
		Body:           r.Body,
		ContentLength:  r.ContentLength,
		ResponseHeader: w.Header(),
	}
}

// requestPath returns r's path as the client sent it (RequestURI), in
// url.URL.EscapedPath's form (/a{b} as /a%7Bb%7D), and, if a handler
// before the middleware changed r.URL (http.StripPrefix under a mounted
// sub-router, a rewrite), the escaped path r.URL now holds. Without a
// RequestURI in origin form (a request built by hand, an absolute-form
// target), r.URL's path alone.
func requestPath(r *http.Request) (path, routed string, rewritten bool) {
	routed = r.URL.EscapedPath()
	sent := r.RequestURI
	if !strings.HasPrefix(sent, "/") {
		return routed, "", false
	}
	if i := strings.IndexByte(sent, '?'); i >= 0 {
		sent = sent[:i]
	}
	if sent == routed {
		return routed, "", false
	}
	p, err := url.PathUnescape(sent)
	switch {
	case err != nil:
		return sent, routed, true
	case p == r.URL.Path:
		return routed, "", false // escaped otherwise
	}
	return (&url.URL{Path: p, RawPath: sent}).EscapedPath(), routed, true
}

// covers reports whether requests with this method are covered.
func (e *Engine) covers(method string) bool {
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
	return e.covers(method) && (e.cfg.Required || headerValues(h, e.cfg.KeyHeader) != nil ||
		e.cfg.LegacyKeyHeader != "" && headerValues(h, e.cfg.LegacyKeyHeader) != nil)
}

// headerValues returns h.Values(name) for a canonical name, reading an
// http.Header by index rather than canonicalising the name again.
func headerValues(h HeaderGetter, name string) []string {
	if std, ok := h.(http.Header); ok {
		return std[name]
	}
	return h.Values(name)
}

// headerGet is h.Get(name) for a canonical name (see headerValues).
func headerGet(h HeaderGetter, name string) string {
	if std, ok := h.(http.Header); ok {
		if v := std[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return h.Get(name)
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
	if !e.covers(req.Method) {
		return nil, nil
	}
	key, present, err := e.Key(req.Header)
	if !present && !e.cfg.Required {
		return nil, nil // the common unprotected case costs no more than this
	}
	start := time.Now()
	route, endpoint := req.Route, req.Route
	if route == "" {
		route, endpoint = unmatchedRoute, req.Path
	}
	fail := func(o Outcome, p *Problem, err error) (*Flight, *Response) {
		e.observe(Event{Context: req.Context, Outcome: o, Transport: httpAnswers.transport, Method: req.Method, Route: route, Key: key,
			Code: p.Status, Err: err}, start)
		return nil, e.problem(p, nil)
	}
	switch {
	case err != nil:
		return fail(OutcomeInvalidKey, &Problem{Type: problemInvalidKey, Title: "Invalid idempotency key",
			Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), ErrInvalidKey.Error()+": ")}, err)
	case !present:
		return fail(OutcomeInvalidKey, &Problem{Type: problemMissingKey, Title: "Missing idempotency key",
			Status: http.StatusBadRequest, Detail: "this request requires an " + e.cfg.KeyHeader + " header"}, nil)
	}

	body, err := e.readBody(req)
	if err != nil {
		var maxBytes *http.MaxBytesError // an http.MaxBytesReader around the body
		if errors.Is(err, errBodyTooLarge) || errors.As(err, &maxBytes) {
			limit := e.cfg.MaxBodyBytes
			if maxBytes != nil {
				limit = min(limit, maxBytes.Limit)
			}
			return fail(OutcomeTooLarge, &Problem{Type: problemBodyTooLarge, Title: "Request body too large",
				Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("a request with an idempotency key may have at most %d bytes of body", limit)}, err)
		}
		if errors.Is(err, errBodyConsumed) {
			return fail(OutcomeBadBody, &Problem{Type: problemBodyConsumed, Title: "Request body already read",
				Status: http.StatusInternalServerError, Detail: "the server read the request body before the idempotency middleware"}, err)
		}
		// The client went away or sent a broken body: nothing to protect.
		return fail(OutcomeBadBody, &Problem{Type: problemUnreadableBody, Title: "Unreadable request body",
			Status: http.StatusBadRequest, Detail: err.Error()}, err)
	}

	c := Call{
		Context:     req.Context,
		Key:         key,
		Method:      req.Method,
		Route:       route,
		Fingerprint: fingerprint(req.Method, req.Path, req.Query, headerGet(req.Header, "Content-Type"), body, e.cfg.CriticalHeaders, req.Header),
	}
	if req.Host != "" {
		c.Fingerprint = hostFingerprint(c.Fingerprint, req.Host)
	}
	if req.rewritten {
		c.Fingerprint = routedFingerprint(c.Fingerprint, req.routed)
	}
	if e.cfg.Scope != nil || e.cfg.TTL != nil {
		c.Scope, c.TTL = e.scopeAndTTL(*req)
	}
	f := &Flight{body: body}
	l, rec, err := e.acquire(&c, endpoint, start, &httpAnswers, &f.lease)
	switch {
	case l != nil:
		if len(req.ResponseHeader) > 0 {
			f.base = req.ResponseHeader.Clone()
		}
		return f, nil
	case rec != nil:
		e.replay(&f.answer, rec) // the Flight's memory, unused otherwise
		return nil, &f.answer
	case errors.Is(err, ErrKeyReused):
		return nil, e.problem(&Problem{Type: problemKeyReused, Title: "Idempotency key reused",
			Status: http.StatusUnprocessableEntity,
			Detail: "this idempotency key was already used with a different request"}, nil)
	case errors.Is(err, ErrQuotaExceeded):
		h := make(http.Header, 2)
		h.Set("Retry-After", e.quotaRetryAfter(err))
		return nil, e.problem(&Problem{Type: problemQuotaExceeded, Title: "Idempotency quota exceeded",
			Status: http.StatusTooManyRequests, Detail: quotaDetail(err)}, h)
	case errors.Is(err, errNested):
		return nil, e.problem(&Problem{Type: problemMiddlewareTwice, Title: "Idempotency middleware ran twice",
			Status: http.StatusInternalServerError,
			Detail: "the request went through the idempotency middleware twice (mounted twice, or dispatched again by a handler), " +
				"and the first pass holds its key: mount the middleware once on the route"}, nil)
	case errors.Is(err, ErrInFlight):
		return nil, e.problem(&Problem{Type: problemKeyInFlight, Title: "Request in flight",
			Status: http.StatusConflict,
			Detail: "a request with this idempotency key is being processed; retry later"}, e.retryAfter())
	default:
		return nil, e.unavailable("the request was not run because its idempotency cannot be guaranteed; retry later")
	}
}

// scopeAndTTL returns Config.Scope's and Config.TTL's answers for req. It
// takes a copy, which the functions may keep, so that Begin's req, which
// they never see, stays on its caller's stack.
func (e *Engine) scopeAndTTL(req Request) (scope string, ttl time.Duration) {
	if e.cfg.Scope != nil {
		scope = e.cfg.Scope(&req)
	}
	if e.cfg.TTL != nil {
		ttl = e.cfg.TTL(&req)
	}
	return scope, ttl
}

// unmatchedRoute is Event.Route of a request without a route template.
const unmatchedRoute = "unmatched"

// unavailable is the 503 of a store failure under FailClosed, or of a
// Buffered flight whose commit failed.
func (e *Engine) unavailable(detail string) *Response {
	return e.problem(&Problem{Type: problemStoreUnavailable, Title: "Idempotency store unavailable",
		Status: http.StatusServiceUnavailable, Detail: detail}, e.retryAfter())
}

// httpAnswers are the codes of the HTTP refusals, for their events, and the
// final statuses a record may replay (a 1xx replayed hangs the client).
var httpAnswers = answers{
	transport:   "http",
	conflict:    http.StatusConflict,
	mismatch:    http.StatusUnprocessableEntity,
	unavailable: http.StatusServiceUnavailable,
	quota:       http.StatusTooManyRequests,
	nested:      http.StatusInternalServerError,
	check:       checkHTTPCode,
}

func checkHTTPCode(rec *Record) error {
	if rec.Code < 200 || rec.Code > 999 {
		return fmt.Errorf("code %d", rec.Code)
	}
	return nil
}

func (e *Engine) retryAfter() http.Header {
	h := make(http.Header, 2)
	h.Set("Retry-After", e.retry)
	return h
}

// replay sets r to the response of a stored record: its headers, the
// replay's own and its Content-Length (none if it has trailers, which
// HTTP/1.1 sends only chunked).
func (e *Engine) replay(r *Response, rec *Record) {
	h := http.Header(rec.Header)
	if h == nil {
		h = make(http.Header, 4)
	}
	n := 1 // the values below: one allocation, of their number
	if bodyAllowed(rec.Code) {
		n++
	}
	if e.cfg.ReplayTimestamp {
		n++
	}
	if rec.BodyOmitted {
		n++
	}
	values := make([]string, 0, n)
	add := func(name, value string) {
		values = append(values, value)
		n := len(values)
		h[name] = values[n-1 : n : n] // an Add to one header cannot overwrite the next
	}
	add(e.cfg.ReplayHeader, "true")
	if bodyAllowed(rec.Code) && !hasTrailers(h) {
		add("Content-Length", strconv.Itoa(len(rec.Body)))
	}
	if e.cfg.ReplayTimestamp {
		add(HeaderOriginalTimestamp, rec.RequestedAt.UTC().Format(time.RFC3339))
	}
	if rec.BodyOmitted {
		add(HeaderBodyOmitted, "sha256="+hex.EncodeToString(rec.BodySHA256[:])+"; size="+strconv.FormatInt(rec.BodySize, 10))
	}
	*r = Response{StatusCode: rec.Code, Header: h, Body: rec.Body}
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
	size := int64(512)                        // an undeclared body's first read
	if want > 1 {
		size = min(want, initialBodyBuffer)
	}
	buf := make([]byte, 0, size)
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
			// A body cut short on the wire is io.ErrUnexpectedEOF (net/http,
			// and httpadapt's fasthttp stream); a shorter one that ends with
			// io.EOF was decompressed by a middleware that left
			// ContentLength as sent (gin-contrib/gzip).
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

// Flight is a request that holds its key's lock while the handler runs.
// The adapter feeds it the response (Write, then Complete) or drops it
// (Abort). Complete and Abort may be called more than once and in any
// order: only the first call counts, so `defer f.Abort()` covers a panic.
type Flight struct {
	lease Lease
	body  []byte
	base  http.Header // response headers set before the handler ran

	// the captured response body, or its hash once it outgrew the limit
	resp   []byte
	size   int64
	hasher hash.Hash

	answer Response // Begin's replay

	// the memory of what an adapter hands the handler: one allocation
	// instead of three
	ctx    flightContext
	reader bodyReader
	writer captureWriter
}

// flightContext is the first context NewContext returns: a context.WithValue
// of leaseKey that lives in the Flight.
type flightContext struct {
	context.Context
	f *Flight
}

func (c *flightContext) Value(key any) any {
	if key == (leaseKey{}) {
		return &c.f.lease
	}
	return c.Context.Value(key)
}

// NewContext returns a copy of ctx that carries the flight, for the
// handler's InfoFromContext.
func (f *Flight) NewContext(ctx context.Context) context.Context {
	if f.lease.tx != nil {
		ctx = f.lease.tx.Context(ctx)
	}
	if f.ctx.f == nil {
		f.ctx = flightContext{Context: ctx, f: f}
		return &f.ctx
	}
	return f.lease.NewContext(ctx)
}

// Body returns the request body that Begin read, for the handler.
func (f *Flight) Body() []byte { return f.body }

// Buffered reports whether the response must be held back until Complete
// returns: with a TxStore, the handler's writes commit with the record,
// and a response sent before the commit could announce an effect that is
// then rolled back. Write then keeps the whole body.
func (f *Flight) Buffered() bool { return f.lease.tx != nil }

// BufferedBody returns the body that Write kept, for a Buffered flight's
// adapter to send after Complete.
func (f *Flight) BufferedBody() []byte { return f.resp }

// Write records p as part of the response body. It never fails.
func (f *Flight) Write(p []byte) (int, error) {
	f.size += int64(len(p))
	switch {
	case f.lease.tx != nil:
		f.resp = append(f.resp, p...)
	case f.hasher != nil:
		f.hasher.Write(p)
	case len(f.resp)+len(p) > f.lease.e.cfg.MaxStoredBodyBytes:
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
// (the body went through Write): the response is stored, less the headers
// left as Request.ResponseHeader had them and the storage policy's, and the
// lock released; if Config.Storable refuses the status, the lock is
// released without storing. If the store fails to take the response, the
// lock is left to expire (see Lease.Complete). header is not changed.
//
// Complete returns nil, or, when a Buffered flight failed to commit, the
// response to send instead of the handler's (503): nothing of the handler's
// was kept.
func (f *Flight) Complete(status int, header http.Header) *Response {
	return f.complete(status, header, false)
}

// complete is Complete; with owned, header is the Flight's own (a copy
// taken at WriteHeader), kept as the record's headers rather than copied.
func (f *Flight) complete(status int, header http.Header, owned bool) *Response {
	// Storable runs first: if it panics, the flight is not over yet and the
	// adapter's deferred Abort releases the lock.
	e := f.lease.e
	if !(status >= 200 && status <= 999 && e.cfg.Storable(status)) {
		f.lease.Release(status, nil)
		return nil
	}
	if status >= 500 && f.lease.nested.Load() {
		// The second pass's 500 middleware-twice, even to a Storable that
		// keeps 5xx: a server bug, which a retry must not meet once fixed.
		f.lease.Release(status, errNested)
		return nil
	}
	kept := header
	if !owned {
		kept = make(http.Header, len(header))
	}
	for k, v := range header {
		switch base := slices.Equal(v, f.base[k]); {
		case base && owned:
			delete(kept, k)
		case !base && !owned:
			kept[k] = v
		}
	}
	rec := &f.lease.rec // unused: a Flight's lease replays nothing
	*rec = Record{Code: status, Header: kept, Body: f.resp}
	if f.hasher != nil {
		rec.BodyOmitted, rec.BodySize = true, f.size
		f.hasher.Sum(rec.BodySHA256[:0])
	}
	if f.lease.Complete(rec) != nil {
		return e.unavailable("the request's writes and its result could not be committed, so none was kept; retry later")
	}
	return nil
}

// ResetHeader sets h back to the response headers set before the handler
// ran (Request.ResponseHeader), for the Response that Complete returns in
// place of a Buffered flight's own.
func (f *Flight) ResetHeader(h http.Header) {
	clear(h)
	for k, v := range f.base {
		h[k] = v
	}
}

// Abort ends the flight without storing: the lock is released so a retry
// runs the handler again. Use it after a panic, for a hijacked connection,
// a body the adapter cannot capture (Fiber's body stream), or a response
// that is not the handler's (a router's 404).
//
// If the handler was given ResponseWriter and f is Buffered, none of its
// response was sent: Abort sets the response's headers back to those set
// before the handler, for whatever answers instead (a recovered panic's
// 500). After Finish or Abandon, Abort does nothing.
func (f *Flight) Abort() {
	if w := &f.writer; w.flight != nil && !w.ended {
		w.ended = true
		if f.Buffered() {
			f.ResetHeader(w.ResponseWriter.Header())
		}
	}
	f.lease.Release(0, errAborted)
}

var errAborted = errors.New("idem: flight aborted: response not stored (panic, hijack, body stream or not the handler's)")

// Request returns r as the handler gets it while f is open: its body reads
// what Begin read, and its context carries f (InfoFromContext, a TxStore's
// transaction). It sets r.Body.
func (f *Flight) Request(r *http.Request) *http.Request {
	f.reader.Reset(f.body)
	r.Body = &f.reader
	return r.WithContext(f.NewContext(r.Context()))
}

// ResponseWriter returns the writer the handler gets while f is open: it
// passes the response on to w and copies it into f, and notes the status
// and a hijacked connection; a Buffered flight's response waits for
// Finish. A flush does not stop the capture: the response is stored when
// the handler returns, like any other (docs/design.md, "Adapters"). Once a
// write to w fails (the client went away), nothing more is sent, and the
// handler's writes report success until its body passes MaxStoredBodyBytes,
// so that its whole response is stored for the client's retry.
func (f *Flight) ResponseWriter(w http.ResponseWriter) http.ResponseWriter {
	f.writer = captureWriter{ResponseWriter: w, flight: f}
	return &f.writer
}

// Finish ends f once the handler, given ResponseWriter, has returned:
// Abort if the connection was hijacked, else Complete with the status and
// the headers as they were sent (headers changed after WriteHeader never
// reach the client) and the trailers set by now (named by the Trailer
// header or with http.TrailerPrefix, which do), or, if the handler wrote
// nothing, 200 and the headers as they are now, as net/http then sends
// them. A Buffered flight's response is sent then, or, if its commit
// failed, the 503 that Complete returns, with the headers set before the
// handler: through answer (an adapter's error handler, which writes to the
// writer ResponseWriter was given), or as problem+json if answer is nil.
// Once f has ended (Finish, Abandon, Abort), Finish does nothing.
func (f *Flight) Finish(answer func(*Response)) { f.writer.finish(answer) }

// Abandon ends f without storing, as Abort, once the handler, given
// ResponseWriter, has returned a response that is not its to keep (a
// router's 404): a Buffered flight sends it then. Once f has ended,
// Abandon does nothing.
func (f *Flight) Abandon() {
	w := &f.writer
	if w.ended {
		return
	}
	w.ended = true
	f.lease.Release(0, errAborted)
	if f.Buffered() && !w.hijacked {
		w.send()
	}
}

// bodyReader is the request body of Flight.Request.
type bodyReader struct{ bytes.Reader }

// Close does nothing: the bytes are in memory.
func (*bodyReader) Close() error { return nil }

// captureWriter is the writer of Flight.ResponseWriter.
type captureWriter struct {
	http.ResponseWriter
	flight *Flight

	status   int
	header   http.Header // as sent: a copy taken with the status
	hijacked bool
	ended    bool // by Finish, Abandon or Abort
	client   clientgone.State
}

// WriteHeader notes the first final status and the headers sent with it,
// and passes it on (a Buffered flight's final status waits for Finish).
func (w *captureWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		w.header = w.ResponseWriter.Header().Clone()
		if w.flight.Buffered() {
			return
		}
	}
	if code >= 200 && w.flight.Buffered() {
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write copies p into the Flight and passes it on (a Buffered flight's body
// waits for Finish; nothing more is sent once the client has gone away:
// package clientgone).
func (w *captureWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.flight.Write(p) //nolint:errcheck // never fails
	if w.flight.Buffered() {
		return len(p), nil
	}
	var err error
	if w.client.Sending() {
		_, err = w.ResponseWriter.Write(p)
	}
	return w.client.Wrote(len(p), err, w.flight.hasher == nil)
}

// FlushError flushes: the status and headers, if not sent yet, and the
// body so far. http.ResponseController and Echo's Response.Flush call it.
// A Buffered flight flushes nothing before Finish, nor one whose client has
// gone away.
func (w *captureWriter) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK) // as net/http sends it on a flush
	}
	if w.flight.Buffered() || !w.client.Sending() {
		_, err := w.client.Wrote(0, nil, w.flight.hasher == nil)
		return err
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for code that asserts http.Flusher.
func (w *captureWriter) Flush() { w.FlushError() } //nolint:errcheck // as http.Flusher, no error to report

// Hijack hijacks, and notes a hijack that succeeded: the response is then
// not stored. A Buffered flight refuses (http.ErrNotSupported): what the
// handler would write on the connection could announce writes that are
// then rolled back.
func (w *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.flight.Buffered() {
		return nil, nil, http.ErrNotSupported
	}
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish is Flight.Finish.
func (w *captureWriter) finish(answer func(*Response)) {
	if w.ended {
		return
	}
	if w.hijacked {
		w.ended = true
		w.flight.Abort()
		return
	}
	// w.header is the writer's own copy, kept by the record, unless a
	// Buffered flight's send still needs it.
	status, header, owned := w.status, w.header, !w.flight.Buffered()
	if status == 0 {
		status, header, owned = http.StatusOK, w.ResponseWriter.Header(), false
	} else {
		trailers.Add(w.header, w.ResponseWriter.Header())
	}
	resp := w.flight.complete(status, header, owned) // if Storable panics, a deferred Abort still counts
	w.ended = true
	switch {
	case resp != nil:
		w.flight.ResetHeader(w.ResponseWriter.Header())
		if answer != nil {
			answer(resp)
		} else {
			resp.Write(w.ResponseWriter)
		}
	case w.flight.Buffered():
		w.send()
	}
}

// send sends a Buffered flight's held response.
func (w *captureWriter) send() {
	h := w.ResponseWriter.Header()
	status := w.status
	if status == 0 {
		status = http.StatusOK
	} else {
		clear(h)
		maps.Copy(h, w.header) // as the handler sent them
	}
	w.ResponseWriter.WriteHeader(status)
	if body := w.flight.BufferedBody(); len(body) > 0 { // an empty Write is a body to a compressing writer
		w.ResponseWriter.Write(body) //nolint:errcheck // the client went away; nothing to do
	}
}

// Response is a response the Engine answers with instead of running the
// handler: a replay of a stored response, or an error.
type Response struct {
	StatusCode int
	Header     http.Header
	Body       []byte // a replay's may share memory with the store: never modify it
	// Problem is set when the response is an error; Body is then its JSON.
	Problem *Problem
}

// SetHeaders sets r's headers but its Content-Type on dst (Retry-After,
// Link), for an error handler that renders a refusal's body its own way.
func (r *Response) SetHeaders(dst http.Header) {
	for k, v := range r.Header {
		if k != "Content-Type" {
			dst[k] = v
		}
	}
}

// Write writes r to w: the headers, the status and the body. An empty body
// is not written at all: a compressing writer before the adapter (Echo's
// Gzip) takes even an empty Write for a body, and would send a replay of a
// 204 or an empty 200 compressed, with a Content-Encoding and a
// Content-Type that the handler's response did not have. A Content-Length
// is set unless r has one or has trailers (http.TrailerPrefix).
func (r *Response) Write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range r.Header {
		h[k] = v
	}
	if bodyAllowed(r.StatusCode) && r.Header["Content-Length"] == nil && !hasTrailers(r.Header) {
		h.Set("Content-Length", strconv.Itoa(len(r.Body)))
	}
	w.WriteHeader(r.StatusCode)
	if len(r.Body) > 0 {
		w.Write(r.Body) //nolint:errcheck // the client went away; nothing to do
	}
}

// hasTrailers reports whether h holds a trailer (http.TrailerPrefix): an
// HTTP/1.1 response sends trailers only chunked, without a Content-Length.
func hasTrailers(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// bodyAllowed reports whether a response with this status may have a body
// and so a Content-Length (RFC 9110: not 1xx, 204 or 304).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
