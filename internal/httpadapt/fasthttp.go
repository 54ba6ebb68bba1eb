package httpadapt

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/core"
)

// fasthttp reuses a request's and a response's buffers once the handler
// returns, and Fiber's strings point into them: whatever the Engine keeps
// (key, scope, method, path, headers, body) is copied here first. The
// interfaces below are the methods of fasthttp's types that the adapters
// use (fasthttp v1.78, which fiberidem and fiberv3idem require).

// FastRequestHeader is what the adapters read of a *fasthttp.RequestHeader.
type FastRequestHeader interface {
	Peek(key string) []byte
	PeekAll(key string) [][]byte
	VisitAll(f func(key, value []byte))
}

// FastResponseHeader is what the adapters set of a *fasthttp.ResponseHeader.
type FastResponseHeader interface {
	Set(key, value string)
	Add(key, value string)
}

// FastResponse is what the adapters set of a *fasthttp.Response.
type FastResponse interface {
	SetStatusCode(code int)
	SetBody(body []byte)
}

// FastRequest is what the adapters read of a *fasthttp.Request's body.
type FastRequest interface {
	IsBodyStream() bool
	BodyStream() io.Reader
	Body() []byte
}

// FastHeaders returns the Engine's two views of a request's headers: header
// for core.Engine.Begin, which copies values out of fasthttp's buffers, and
// keyed for core.Engine.Keyed, which only tells whether a header is there
// and copies nothing. With fold, names are compared ignoring case: an app
// that disables fasthttp's header normalizing gets names as sent, and a key
// sent as "idempotency-key" (HTTP/2 clients, Envoy) must still be found.
func FastHeaders[H FastRequestHeader](h H, fold bool) (header, keyed core.HeaderGetter) {
	if fold {
		return foldedHeader[H]{h}, foldedHeader[H]{h}
	}
	return requestHeader[H]{h}, presentHeader[H]{h}
}

type requestHeader[H FastRequestHeader] struct{ h H }

func (h requestHeader[H]) Get(name string) string { return string(h.h.Peek(name)) }

func (h requestHeader[H]) Values(name string) []string { return copyAll(h.h.PeekAll(name)) }

// presentHeader serves Engine.Keyed, which only asks whether Values is
// nil: its Values is not the header's values.
type presentHeader[H FastRequestHeader] struct{ h H }

var present = []string{""}

func (h presentHeader[H]) Get(name string) string { return string(h.h.Peek(name)) }

func (h presentHeader[H]) Values(name string) []string {
	if len(h.h.PeekAll(name)) == 0 {
		return nil
	}
	return present
}

// foldedHeader serves both Keyed and Begin, copying a key once more: apps
// that disable header normalizing are rare.
type foldedHeader[H FastRequestHeader] struct{ h H }

func (h foldedHeader[H]) Get(name string) string {
	if all := h.peekAll(name); len(all) > 0 {
		return string(all[0])
	}
	return ""
}

func (h foldedHeader[H]) Values(name string) []string { return copyAll(h.peekAll(name)) }

func (h foldedHeader[H]) peekAll(name string) [][]byte {
	var all [][]byte
	h.h.VisitAll(func(k, v []byte) {
		if len(k) == len(name) && strings.EqualFold(string(k), name) {
			all = append(all, v)
		}
	})
	return all
}

// copyAll copies header values out of fasthttp's buffers; nil if none.
func copyAll(all [][]byte) []string {
	if len(all) == 0 {
		return nil
	}
	vs := make([]string, len(all))
	for i, v := range all {
		vs[i] = string(v)
	}
	return vs
}

// ContentLength converts fasthttp's Content-Length (negative when chunked or
// unknown) to core.Request.ContentLength.
func ContentLength(n int) int64 {
	if n < 0 {
		return -1
	}
	return int64(n)
}

// StableMethod returns method as a string of its own: Fiber's c.Method()
// points into the request buffer. The covered methods cost no copy.
func StableMethod(method string) string {
	switch method {
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	}
	return strings.Clone(method)
}

// HeaderSink collects the response headers that fasthttp hands Add (pass
// it to VisitAll, or call it in a range over All) into an http.Header with
// canonical names, as the Engine stores them. A method value of a concrete
// type, unlike a closure through an interface, needs no allocation.
type HeaderSink struct {
	// Header receives the headers; nil is made on the first one.
	Header http.Header
	// Preset leaves out Content-Type, for core.Request.ResponseHeader: the
	// headers that middleware before the adapter set (CORS, request ids),
	// nil if there are none but fasthttp's default Content-Type.
	Preset bool

	// the first value of the first headers: Header's slices point here,
	// one allocation less per header
	values [4]string
	used   int
}

// Add copies one header out of fasthttp's buffers. Content-Length is left
// out: the Engine never stores it, and fasthttp sets it from the body.
func (s *HeaderSink) Add(k, v []byte) {
	if string(k) == "Content-Length" || s.Preset && string(k) == "Content-Type" {
		return
	}
	if s.Header == nil {
		s.Header = make(http.Header)
	}
	key, ok := commonNames[string(k)] // no copy of the name for these
	if !ok {
		key = http.CanonicalHeaderKey(string(k))
	}
	value, ok := commonValues[string(v)]
	if !ok {
		value = string(v)
	}
	if vs, ok := s.Header[key]; ok || s.used == len(s.values) {
		s.Header[key] = append(vs, value) // vs is capped: a copy
		return
	}
	s.values[s.used] = value
	s.Header[key] = s.values[s.used : s.used+1 : s.used+1]
	s.used++
}

// commonNames are the canonical names of the response headers that most
// responses carry, and commonValues the values of Content-Type that most
// responses carry.
var commonNames, commonValues = map[string]string{}, map[string]string{}

func init() {
	for _, name := range []string{"Cache-Control", "Content-Encoding", "Content-Language", "Content-Location", "Content-Type",
		"Etag", "Expires", "Last-Modified", "Link", "Location", "Retry-After", "Server", "Vary"} {
		commonNames[name] = name
	}
	for _, value := range []string{"application/json", "application/json; charset=utf-8", "application/problem+json",
		"text/plain; charset=utf-8", "text/html; charset=utf-8"} {
		commonValues[value] = value
	}
}

// WriteResponse writes an Engine response (a replay or a problem). SetBody
// copies the body into fasthttp's buffer: it may be the store's own bytes.
// The trailers of a record that a net/http adapter stored (keys with
// http.TrailerPrefix) are left out: fasthttp sends none with a body of
// known length, and would write each as a header line "Trailer:Name: v",
// which a client reads as a Trailer header.
func WriteResponse[H FastResponseHeader](res FastResponse, rh H, r *core.Response) {
	res.SetStatusCode(r.StatusCode)
	for k, vs := range r.Header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		for i, v := range vs {
			if i == 0 {
				rh.Set(k, v)
			} else {
				rh.Add(k, v)
			}
		}
	}
	res.SetBody(r.Body)
}

// FastStreamedResponse is what ReadBodyStream needs of a *fasthttp.Response.
type FastStreamedResponse interface {
	FastResponse
	BodyStream() io.Reader
}

// ReadBodyStream reads a response's body stream (Fiber's SendStream, a
// net/http handler that flushed through Fiber's adaptor) into its body, for
// a Buffered flight: its response commits whole before any of it is sent.
// On an error, the body is what was read.
func ReadBodyStream(res FastStreamedResponse) error {
	b, err := io.ReadAll(res.BodyStream())
	res.SetBody(b) // closes the stream
	return err
}

// FastResettableHeader is what ResetHeader needs of a
// *fasthttp.ResponseHeader.
type FastResettableHeader interface {
	FastResponseHeader
	All() iter.Seq2[[]byte, []byte]
	Del(key string)
}

// ResetHeader sets a Buffered flight's response headers back to base,
// those set before the handler, when the handler's response is not sent (a
// failed commit, a panic): the handler's headers and cookies are deleted;
// Connection is left as it is.
func ResetHeader[H FastResettableHeader](h H, base http.Header) {
	var names []string
	for k := range h.All() {
		if name := string(k); name != "Connection" {
			names = append(names, name)
		}
	}
	for _, name := range names {
		h.Del(name)
	}
	for k, vs := range base {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

// ContentTyper is what SentContentType reads of a *fasthttp.ResponseHeader.
type ContentTyper interface {
	ContentType() []byte
	SetNoDefaultContentType(noDefault bool)
}

// SentContentType reports whether fasthttp sends the Content-Type of a
// response with this status and body size: one that was set, always; its
// default, which ContentType and All report when none is set, only with a
// body (never on a 204, 304 or 1xx). A capture must not store a
// Content-Type that was not sent: its replay would carry it.
func SentContentType[H ContentTyper](h H, status, bodyLen int) bool {
	if bodyLen > 0 && status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified {
		return true
	}
	if len(h.ContentType()) == 0 {
		return false // none set, and no default
	}
	h.SetNoDefaultContentType(true)
	set := len(h.ContentType()) > 0
	if !set {
		h.SetNoDefaultContentType(false) // the default was on: leave it so
	}
	return set
}

// FastProblemHeaders adds the headers of an Engine's problem response but
// its Content-Type (such as Retry-After) to rh, for an adapter's
// ErrorHandler, which renders the body its own way.
func FastProblemHeaders[H FastResponseHeader](rh H, resp *core.Response) {
	for k, vs := range resp.Header {
		if k != "Content-Type" {
			for _, v := range vs {
				rh.Add(k, v)
			}
		}
	}
}

// AppCache remembers what an adapter read of the app that last served a
// request (whether it disables header normalizing, see FastHeaders; how it
// routes): Fiber's App.Config copies the whole Config, too much to do per
// request.
type AppCache[A comparable, V any] struct {
	last atomic.Pointer[appEntry[A, V]]
}

type appEntry[A comparable, V any] struct {
	app A
	v   V
}

// Get returns read(app), asking read only when app is not the last app
// asked about.
func (c *AppCache[A, V]) Get(app A, read func(A) V) V {
	if last := c.last.Load(); last != nil && last.app == app {
		return last.v
	}
	last := &appEntry[A, V]{app, read(app)}
	c.last.Store(last)
	return last.v
}

// Localer is a Fiber context's store of per-request values (c.Locals), the
// same method in Fiber v2 and v3.
type Localer interface {
	Locals(key any, value ...any) any
}

// FastState is what one request that Engine.Begin acts on needs, in one
// allocation, for an adapter over fasthttp: set Req.Context to &Ctx, and
// Req.Body to Body(req).
type FastState struct {
	Req    core.Request
	Ctx    LocalsContext
	body   bytes.Reader
	stream bodyStream

	// Preset collects the headers set before the handler ran, for
	// Req.ResponseHeader, and Sent those sent, for Flight.Complete.
	Preset, Sent HeaderSink
}

// Body returns the request body for core.Request.Body: the stream of
// Fiber's StreamRequestBody (Begin reads it once, bounded), or the bytes,
// or nil if there are none. A stream that ends short of Req.ContentLength
// fails with io.ErrUnexpectedEOF, as net/http's body does: fasthttp ends it
// with io.EOF, and core takes a body that ends with io.EOF as whole.
func (s *FastState) Body(r FastRequest) io.Reader {
	if r.IsBodyStream() {
		s.stream = bodyStream{r: r.BodyStream(), declared: &s.Req.ContentLength}
		return &s.stream
	}
	if b := r.Body(); len(b) > 0 {
		s.body.Reset(b)
		return &s.body
	}
	return nil
}

// bodyStream reads a request's body stream, counting what it read.
type bodyStream struct {
	r        io.Reader
	n        int64
	declared *int64 // the request's Content-Length, -1 if unknown
	ended    bool   // a read returned an error: nothing more to read
}

func (b *bodyStream) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	b.ended = b.ended || err != nil
	if err == io.EOF {
		if b.n < *b.declared {
			err = fmt.Errorf("the body ended after %d of its %d bytes: %w", b.n, *b.declared, io.ErrUnexpectedEOF)
		}
	}
	return n, err
}

// maxDiscarded is how much of a streamed request body fasthttp reads and
// discards after the handlers, to keep the connection (its
// maxUnreadStreamBodySize); with more left, it closes the connection.
const maxDiscarded = 256 << 10

// LeftUnread reports whether Begin, answering without running the
// handler, left more of a streamed request body unread than fasthttp
// discards (a body over MaxBodyBytes, a bad key), or an unknown amount of a
// chunked one: fasthttp would close the connection as soon as the answer is
// written, and a client still sending the body would meet a reset instead
// of the answer. The adapter then answers through Linger.
func (s *FastState) LeftUnread() bool {
	b := &s.stream
	return b.r != nil && !b.ended && (*b.declared < 0 || *b.declared-b.n > maxDiscarded)
}

// FastWritable is what Linger writes of a *fasthttp.Response, and
// FastConnectionHeader what it sets of its header.
type (
	FastWritable interface {
		Write(w *bufio.Writer) error
	}
	FastConnectionHeader interface {
		Del(key string)
		SetConnectionClose()
	}
)

// lingerTimeout is how long Linger waits for the client: net/http's wait
// before it closes a connection whose request body a handler left unread.
const lingerTimeout = 500 * time.Millisecond

// Linger returns a fasthttp HijackHandler for a request whose body is left
// unread (LeftUnread), on conn, the request's connection: it writes res
// with Connection: close, closes the connection's write side, and reads and
// discards what the client still sends, until the client closes or for
// half a second, so that the client reads the answer before the connection
// closes, as net/http's server lets it. The adapter hijacks the connection
// with HijackSetNoResponse: fasthttp would close it before a hijack after
// an answer that says Connection: close. Linger returns nil for a
// connection that cannot be half-closed (Fiber's app.Test, a wrapper such
// as Server.MaxConnsPerIP's), which the adapter leaves to fasthttp.
//
// The handler reads res after the adapter returned, as fasthttp allows: the
// request's context is released only when the handler returns.
func Linger(res FastWritable, h FastConnectionHeader, conn net.Conn) func(net.Conn) {
	half, ok := conn.(interface{ CloseWrite() error })
	if !ok {
		return nil
	}
	return func(c net.Conn) {
		defer c.Close()                              // fasthttp closes it too, unless Server.KeepHijackedConns
		c.SetDeadline(time.Now().Add(lingerTimeout)) //nolint:errcheck // a failed deadline fails the write or the read
		h.Del("Connection")                          // fasthttp's keep-alive for HTTP/1.0
		h.SetConnectionClose()
		w := bufio.NewWriter(c)
		if res.Write(w) == nil && w.Flush() == nil && half.CloseWrite() == nil {
			io.Copy(io.Discard, c) //nolint:errcheck // the connection closes either way
		}
	}
}

// LocalsContext is a request's context whose Value reads Locals first, so
// that a core.Config.Scope function finds what an authentication middleware
// stored with c.Locals.
type LocalsContext struct {
	context.Context
	Locals Localer
}

// Value returns the Locals value for key, else the context's.
func (l LocalsContext) Value(key any) any {
	if v := l.Locals.Locals(key); v != nil {
		return v
	}
	return l.Context.Value(key)
}
