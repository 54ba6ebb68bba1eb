// Package httpadapt holds what idem's HTTP adapters share beyond core: the
// Engine's view of a net/http request and of its response (Echo v4 and v5),
// and of fasthttp's buffers (Fiber v2 and v3). It needs no framework: the
// adapters pass in their framework's values through small interfaces, so
// the root module gains no dependency. It is internal: its API changes with
// the adapters, and the users of an adapter never see it.
package httpadapt

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"

	"github.com/idem-go/idem/core"
)

// Getter is a framework's store of per-request values under string keys,
// such as Echo's c.Get.
type Getter interface {
	Get(key string) any
}

// Values is a request's context whose Value reads Store first for a string
// key, so that a core.Config.Scope function finds what an authentication
// middleware stored with the framework (Echo's c.Set, echo-jwt's "user").
type Values struct {
	context.Context
	Store Getter
}

// Value returns Store's value for a string key, else the context's.
func (v *Values) Value(key any) any {
	if k, ok := key.(string); ok {
		if x := v.Store.Get(k); x != nil {
			return x
		}
	}
	return v.Context.Value(key)
}

// Protected is what one request that Engine.Begin acts on needs, in one
// allocation, for an adapter over net/http.
type Protected struct {
	Req core.Request
	Ctx Values
	// BodyLimit reports whether a read of the body failed with the error of
	// the framework's own body limit (Echo's BodyLimit middleware, for a
	// body of unknown length); set before Begin. Nil: none.
	BodyLimit func(error) bool

	body limitedBody
}

// BodyLimitError returns the error of the framework's body limit that the
// body failed with while Begin read it (BodyLimit), nil if none: the
// adapter returns it to the framework, which answers it as it does
// without idem.
func (p *Protected) BodyLimitError() error { return p.body.err }

// limitedBody is a request's body that keeps the error of the framework's
// body limit (Protected.BodyLimit).
type limitedBody struct {
	io.ReadCloser
	limit func(error) bool
	err   error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.limit(err) {
		b.err = err
		return n, limitError{err}
	}
	return n, err
}

// limitError is the error of the framework's body limit as Begin sees it:
// a body too large (an *http.MaxBytesError to errors.As), so that the
// Observer gets OutcomeTooLarge and 413, the status the framework answers.
type limitError struct{ err error }

func (e limitError) Error() string { return e.err.Error() }
func (e limitError) Unwrap() error { return e.err }

func (e limitError) As(target any) bool {
	t, ok := target.(**http.MaxBytesError)
	if ok && !errors.As(e.err, t) {
		*t = &http.MaxBytesError{Limit: math.MaxInt64} // the framework's limit is not known
	}
	return ok
}

// Begin fills p.Req from r and asks eng what to do (core.Engine.Begin).
// route is the route template ("" if unknown), host the host the router
// chose the handler by (core.Request.Host, "" if none), store the
// framework's per-request values, w the response writer (its headers so
// far are those of middleware before the adapter).
func (p *Protected) Begin(eng *core.Engine, r *http.Request, route, host string, store Getter, w http.ResponseWriter) (*core.Flight, *core.Response) {
	p.Ctx = Values{Context: r.Context(), Store: store}
	p.Req = core.NewRequest(r, route, w)
	p.Req.Context = &p.Ctx
	p.Req.Host = host
	// The Engine reads the body through the wrapper; r keeps its own. r is
	// the server's request, and net/http knows a body with "Expect:
	// 100-continue" by its type: replaced, a refusal that leaves it unread
	// (a bad key) waits for a body the client is never asked for.
	if p.BodyLimit != nil && r.Body != nil && r.Body != http.NoBody {
		p.body = limitedBody{ReadCloser: r.Body, limit: p.BodyLimit}
		p.Req.Body = &p.body
	}
	return eng.Begin(&p.Req)
}
