package ginidem

import (
	"bufio"
	"bytes"
	"context"
	"maps"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/clientgone"
	"github.com/idem-go/idem/internal/trailers"
)

// An Option configures the middleware.
type Option func(*options)

type options struct {
	errorHandler func(c *gin.Context, p *core.Problem)
}

// WithErrorHandler renders the Engine's refusals (400 bad or missing key or
// unreadable body, 409 key in flight, 413, 422 key reused, 429 over the
// quota, 500 body read before the middleware or the middleware met twice,
// 503 store unavailable) the app's way instead of as
// application/problem+json. The response's other headers, such as
// Retry-After, are already set when it is called, and the chain is aborted
// after it:
//
//	ginidem.New(eng, ginidem.WithErrorHandler(func(c *gin.Context, p *core.Problem) {
//		c.JSON(p.Status, gin.H{"error": p.Title})
//	}))
func WithErrorHandler(h func(c *gin.Context, p *core.Problem)) Option {
	return func(o *options) { o.errorHandler = h }
}

// New returns a Gin middleware that protects the handlers after it with
// eng: r.Use(ginidem.New(eng)), or on a group or a single route.
//
// A replay or an error (problem+json) is written and the chain aborted, so
// no later handler runs. Otherwise the rest of the chain runs and its
// response is stored, unless a handler panicked, the connection was
// hijacked, or the response is not known yet (c.Error with nothing written
// and no success status set); see the package documentation.
//
// New panics if eng is nil.
func New(eng *core.Engine, opts ...Option) gin.HandlerFunc {
	if eng == nil {
		panic("ginidem: New with a nil Engine")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	maxStored := eng.Config().MaxStoredBodyBytes
	return func(c *gin.Context) {
		r := c.Request
		// A request that matched no route (NoRoute, NoMethod: no
		// c.FullPath) is left alone, so that a key sent to a wrong URL is
		// not bound to it.
		if !eng.Keyed(r.Method, r.Header) || c.FullPath() == "" {
			c.Next()
			return
		}
		st := &state{ctx: requestContext{Context: r.Context(), c: c}}
		st.req = core.NewRequest(r, c.FullPath(), c.Writer)
		st.req.Context = &st.ctx
		if v, ok := c.Get(gin.BodyBytesKey); ok {
			// A middleware before this one read the body with
			// ShouldBindBodyWith, which keeps its bytes here and leaves
			// r.Body drained.
			if body, ok := v.([]byte); ok {
				st.body.Reset(body)
				st.req.Body, st.req.ContentLength = &st.body, int64(len(body))
			}
		}
		f, resp := eng.Begin(&st.req)
		switch {
		case resp != nil && resp.Problem != nil && o.errorHandler != nil:
			resp.SetHeaders(c.Writer.Header())
			o.errorHandler(c, resp.Problem)
			c.Abort()
			return
		case resp != nil:
			resp.Write(c.Writer) // a replay is not a handler result: later handlers do not run
			if len(resp.Body) == 0 && resp.Header["Content-Encoding"] == nil {
				// A compressing middleware before this one (gin-contrib/gzip)
				// set it for a body, and drops it after the chain when none
				// came: too late once the headers are sent.
				c.Writer.Header().Del("Content-Encoding")
			}
			c.Writer.WriteHeaderNow() // Gin's WriteHeader only notes the status: sent, even without a body
			c.Abort()
			return
		case f == nil:
			c.Next()
			return
		}

		st.w = writer{ResponseWriter: c.Writer, f: f, buffered: f.Buffered(), maxStored: maxStored}
		returned := false
		defer func() {
			// Also on a panic, before gin.Recovery writes its 500: c.Writer
			// is Gin's again, the lock released and nothing stored (and, if
			// the flight is Buffered, the handlers' headers dropped: none
			// was sent).
			c.Writer = st.w.ResponseWriter
			if !returned && st.w.buffered {
				f.ResetHeader(c.Writer.Header())
			}
			f.Abort() // a no-op once Complete ran
		}()
		c.Request = f.Request(r) // the body Begin read; core.InfoFromContext
		c.Writer = &st.w
		errs := len(c.Errors) // those of middleware before this one are not the handlers'
		c.Next()
		returned = true
		unknown := len(c.Errors) > errs && !st.w.Written()
		if unknown && st.w.statusSet && st.w.Status() < 400 {
			// A success status that the handler set beside a c.Error for
			// the logs (c.Status(204)) is its response: sent now, so that an
			// error middleware before this one, which renders what is not
			// written yet, leaves it as it is.
			st.w.WriteHeaderNow()
			unknown = false
		}
		if st.w.hijacked || unknown {
			// Hijacked, or an error left for a middleware before this one to
			// render: what the client gets is not what was captured.
			return
		}
		header := st.w.sent
		if header == nil { // nothing written yet: Gin sends the headers as they are now
			header = st.w.Header()
		} else {
			trailers.Add(header, st.w.Header()) // sent once the handlers return
		}
		resp = f.Complete(st.w.Status(), header)
		if resp != nil && resp.Problem != nil && o.errorHandler != nil {
			// A Buffered flight whose commit failed: its 503 goes through
			// the hook, as Begin's refusals do, with the headers set before
			// the handlers.
			c.Writer = st.w.ResponseWriter
			f.ResetHeader(c.Writer.Header())
			resp.SetHeaders(c.Writer.Header())
			o.errorHandler(c, resp.Problem)
			return
		}
		if st.w.buffered {
			st.w.send(resp)
		}
	}
}

// state is what one protected request needs, in one allocation.
type state struct {
	req  core.Request
	ctx  requestContext
	w    writer
	body bytes.Reader // a body read before the middleware (ShouldBindBodyWith)
}

// requestContext is the core.Request's Context: the request's deadline and
// cancellation, and the values of both the gin.Context (c.Keys, where c.Set
// puts them, and gin.ContextKey) and the request's context. A *gin.Context
// alone is cancelled only when gin.Engine.ContextWithFallback is set.
type requestContext struct {
	context.Context
	c *gin.Context
}

func (x *requestContext) Value(key any) any {
	if v := x.c.Value(key); v != nil {
		return v
	}
	return x.Context.Value(key)
}

// writer passes the response through to Gin's writer, which keeps the
// status, size and Written state, and copies the body into the Flight. A
// Buffered flight's response is held back instead (Gin's writer only gets
// the status) and sent once the Flight is complete (send).
type writer struct {
	gin.ResponseWriter
	f         *core.Flight
	sent      http.Header // the headers as sent with the first write
	statusSet bool        // the handlers chose a status (c.Status)
	hijacked  bool
	buffered  bool // f.Buffered()
	size      int  // of the body written so far
	maxStored int  // the Engine's MaxStoredBodyBytes
	client    clientgone.State
}

// WriteHeader notes that the handlers chose a status: Gin sends it after
// the chain even if nothing is written.
func (w *writer) WriteHeader(code int) {
	if code <= 0 || w.buffered && w.sent != nil {
		// Gin ignores both: c.Render(-1, …) (c.SSEvent, c.Redirect) keeps
		// the status, and one set once the response has begun. Passed on,
		// -1 would be the status of a writer below that keeps what it is
		// given (gin-contrib/gzip's): a 200 not stored.
		return
	}
	w.statusSet = true
	w.ResponseWriter.WriteHeader(code)
}

// snapshot keeps the headers as Gin sends them, on the first write or
// WriteHeaderNow: later changes never reach the client, so they are not
// stored.
func (w *writer) snapshot() {
	if w.sent == nil {
		w.sent = w.Header().Clone()
	}
}

func (w *writer) Write(p []byte) (int, error) {
	w.snapshot()
	w.f.Write(p) //nolint:errcheck // never fails
	w.size += len(p)
	if w.buffered {
		return len(p), nil
	}
	var err error
	if w.client.Sending() {
		_, err = w.ResponseWriter.Write(p)
	}
	return w.client.Wrote(len(p), err, w.size <= w.maxStored)
}

func (w *writer) WriteString(s string) (int, error) {
	w.snapshot()
	w.f.Write([]byte(s)) //nolint:errcheck // never fails
	w.size += len(s)
	if w.buffered {
		return len(s), nil
	}
	var err error
	if w.client.Sending() {
		_, err = w.ResponseWriter.WriteString(s)
	}
	return w.client.Wrote(len(s), err, w.size <= w.maxStored)
}

// WriteHeaderNow sends the headers without a body (c.AbortWithStatus).
func (w *writer) WriteHeaderNow() {
	w.snapshot()
	if !w.buffered {
		w.ResponseWriter.WriteHeaderNow()
	}
}

// Flush sends the headers, as they are then, and the body so far (c.Stream,
// SSE, httputil.ReverseProxy). The capture goes on: the response is stored
// when the handlers return. A Buffered flight flushes nothing.
func (w *writer) Flush() {
	w.snapshot()
	if !w.buffered && w.client.Sending() {
		w.ResponseWriter.Flush()
	}
}

// Written reports whether the response has begun (held back, for a
// Buffered flight).
func (w *writer) Written() bool {
	if w.buffered || w.sent != nil {
		// Begun here, even if a writer below sends it only later
		// (gin-contrib/timeout's, whose WriteHeaderNow only notes it).
		return w.sent != nil
	}
	return w.ResponseWriter.Written()
}

// Size is the size of the body written so far, -1 before the response has
// begun.
func (w *writer) Size() int {
	switch {
	case !w.buffered:
		return w.ResponseWriter.Size()
	case w.sent == nil:
		return -1
	}
	return w.size
}

// send sends a Buffered flight's response once f.Complete returned resp:
// the handlers' own as they wrote it, or, if resp is not nil (the commit
// failed), resp with the headers set before the handlers.
func (w *writer) send(resp *core.Response) {
	gw := w.ResponseWriter
	if resp != nil {
		w.f.ResetHeader(gw.Header())
		resp.Write(gw)
		return
	}
	if w.sent == nil {
		return // nothing written: Gin sends the status set after the chain
	}
	h := gw.Header()
	clear(h)
	maps.Copy(h, w.sent) // as the handlers sent them
	gw.WriteHeaderNow()
	if body := w.f.BufferedBody(); len(body) > 0 {
		gw.Write(body) //nolint:errcheck // the client went away; nothing to do
	}
}

// Hijack notes a hijack that succeeded: the response is then not stored.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.buffered { // a transaction's writes may yet roll back
		return nil, nil, http.ErrNotSupported
	}
	conn, rw, err := w.ResponseWriter.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the writer below.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
