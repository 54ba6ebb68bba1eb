package swagger

import (
	"errors"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/idem-go/idem/core"
)

// Options says what to document and on which operations. The zero value
// documents the Engine's defaults on every POST, PUT, PATCH and DELETE
// operation; OptionsFor derives Options from an Engine's configuration.
type Options struct {
	// KeyHeader is the request header carrying the key.
	// Default: core.DefaultKeyHeader.
	KeyHeader string
	// Required documents the header as required, as it is when the Engine's
	// Config.Required is set. Default: false.
	Required bool
	// MaxKeyLength is the documented maxLength of the key.
	// Default: core.DefaultMaxKeyLength.
	MaxKeyLength int
	// MaxBodyBytes is the body size past which a request with a key gets
	// 413, as the Engine's Config.MaxBodyBytes. Default:
	// core.DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ResponseTTL is how long a key's response is kept, as the Engine's
	// Config.ResponseTTL: the header's description says it, and its
	// x-idempotency-ttl-seconds extension gives it in seconds (the draft
	// asks a resource to publish its expiry policy).
	// Default: core.DefaultResponseTTL.
	ResponseTTL time.Duration
	// ReplayHeader is the response header that marks a replay, as the
	// Engine's Config.ReplayHeader. Default: core.HeaderReplay.
	ReplayHeader string
	// FailClosed documents the 503 (store-unavailable) that an Engine with
	// Config.FailClosed answers when its store fails. Default: false.
	FailClosed bool
	// Storable is the Engine's store policy (Config.Storable): the
	// documented responses whose status it stores get the replay header.
	// Default: core.DefaultStorable.
	Storable func(status int) bool
	// Methods are the covered methods; an operation with another method is
	// left untouched. Default: core.DefaultMethods.
	Methods []string
	// Operations, when not nil, are the only covered operations (those of
	// them whose method is in Methods). Paths may be written in a
	// framework's syntax (see NormalizePath) and are full paths, as a router
	// reports them: they are matched against BasePath joined with the
	// document's path, ignoring the names of path parameters and a trailing
	// slash. Default: nil, every operation whose method is in Methods.
	Operations []Operation
	// BasePath is the prefix of every path of the document, used to match
	// Operations. Default: the document's basePath (Swagger 2.0) or the path
	// of its first server URL (OpenAPI 3). A swag template's basePath is the
	// action {{.BasePath}}, which cannot be read: pass
	// docs.SwaggerInfo.BasePath here. Write "/" for no prefix.
	BasePath string
}

// Operation is one covered route: a method and a path.
type Operation struct {
	// Method is the HTTP method; empty means every method in
	// Options.Methods (a net/http pattern without a method).
	Method string
	// Path is the full route path, in OpenAPI syntax (/orders/{id}) or a
	// router's (/orders/:id, /files/*path, /files/{path...}).
	Path string
}

// OptionsFor returns the Options that document an Engine with configuration
// cfg (from Engine.Config, which has its defaults filled in). With no ops,
// every operation whose method the Engine covers is documented; otherwise
// only ops are (an adapter passes the routes its middleware covers).
func OptionsFor(cfg core.Config, ops ...Operation) Options {
	return Options{
		KeyHeader:    cfg.KeyHeader,
		Required:     cfg.Required,
		MaxKeyLength: cfg.MaxKeyLength,
		MaxBodyBytes: cfg.MaxBodyBytes,
		ResponseTTL:  cfg.ResponseTTL,
		ReplayHeader: cfg.ReplayHeader,
		FailClosed:   cfg.FailClosed,
		Storable:     cfg.Storable,
		Methods:      slices.Clone(cfg.Methods), // empty, not nil, when the Engine covers nothing
		Operations:   ops,
	}
}

// SortOperations sorts ops by path, then method, and drops duplicates (a
// route a router lists twice), in place: every adapter reports its routes in
// this one order, whatever order its router keeps them in.
func SortOperations(ops []Operation) []Operation {
	slices.SortFunc(ops, func(a, b Operation) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return slices.Compact(ops)
}

// ParseOperation parses "METHOD /path" or "/path", the form of a Go 1.22
// http.ServeMux pattern (a host before the path is ignored).
func ParseOperation(s string) (Operation, error) {
	f := strings.Fields(s)
	switch len(f) {
	case 1:
		return Operation{Path: f[0]}, nil
	case 2:
		return Operation{Method: strings.ToUpper(f[0]), Path: f[1]}, nil
	}
	return Operation{}, errors.New(`swagger: operation: want "METHOD /path", got "` + s + `"`)
}

// NormalizePath converts a route path from a router's syntax to OpenAPI
// path template syntax, for every adapter to report its routes alike:
//
//	/orders/:id            → /orders/{id}          (Gin, Echo, Fiber)
//	/orders/:id<int>?      → /orders/{id}          (Fiber constraint, optional)
//	/flights/:from-:to     → /flights/{from}-{to}  (Fiber)
//	/files/*path           → /files/{path}         (Gin)
//	/files/*, /files/+     → /files/{wildcard}     (Echo, Fiber)
//	/files/{path...}       → /files/{path}         (net/http)
//	/orders/{$}            → /orders/              (net/http)
//	/orders/{id:[0-9]+}    → /orders/{id}          (chi, gorilla/mux)
//	example.com/orders     → /orders               (net/http host)
//
// A parameter name after ':' is letters, digits and underscores; a ':'
// inside a segment ("/things:batch") stays literal, as does a character
// escaped with a backslash.
func NormalizePath(p string) string {
	switch i := strings.IndexByte(p, '/'); {
	case i < 0:
		p = "/" + p
	case i > 0 && p[0] != ':' && p[0] != '*' && p[0] != '{':
		p = p[i:] // a host
	}
	var b strings.Builder
	for i := 0; i < len(p); {
		c := p[i]
		var prev byte
		if i > 0 {
			prev = p[i-1]
		}
		switch {
		case c == '\\' && i+1 < len(p):
			b.WriteByte(p[i+1])
			i += 2
		case c == ':' && (prev == '/' || prev == '-' || prev == '.') && nameLen(p[i+1:]) > 0:
			n := nameLen(p[i+1:])
			b.WriteString("{" + p[i+1:i+1+n] + "}")
			i += 1 + n
			if i < len(p) && p[i] == '<' { // Fiber constraint
				if k := strings.IndexByte(p[i:], '>'); k >= 0 {
					i += k + 1
				}
			}
			if i < len(p) && p[i] == '?' { // Fiber optional parameter
				i++
			}
		case (c == '*' || c == '+') && prev == '/':
			i++
			for i < len(p) && p[i] >= '0' && p[i] <= '9' { // Fiber's *1, +2
				i++
			}
			n := nameLen(p[i:])
			name := p[i : i+n]
			if name == "" {
				name = "wildcard"
			}
			b.WriteString("{" + name + "}")
			i += n
		case c == '{':
			end := closingBrace(p, i)
			if end < 0 {
				b.WriteString(p[i:])
				i = len(p)
				continue
			}
			name := p[i+1 : end]
			if j := strings.IndexByte(name, ':'); j >= 0 { // a regular expression
				name = name[:j]
			}
			name = strings.TrimSuffix(strings.TrimSpace(name), "...")
			if name != "$" {
				b.WriteString("{" + name + "}")
			}
			i = end + 1
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// nameLen is the length of the parameter name at the start of s.
func nameLen(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return i
		}
	}
	return len(s)
}

// closingBrace returns the index of the '}' closing the '{' at p[i], or -1.
func closingBrace(p string, i int) int {
	depth := 0
	for ; i < len(p); i++ {
		switch p[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// pathKey reduces an OpenAPI path template to the form routes are matched
// in: parameter names dropped, cleaned, without a trailing slash.
func pathKey(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '{' {
			if end := closingBrace(p, i); end > 0 {
				b.WriteString("{}")
				i = end
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return path.Clean("/" + b.String())
}

// joinBase joins a base path (or a URL, whose path is taken) and a path.
func joinBase(base, p string) string {
	if i := strings.Index(base, "://"); i >= 0 {
		base = base[i+3:]
		if j := strings.IndexByte(base, '/'); j >= 0 {
			base = base[j:]
		} else {
			base = ""
		}
	}
	return strings.TrimRight(base, "/") + "/" + strings.TrimLeft(p, "/")
}

// filled returns o with its defaults filled in.
func (o Options) filled() Options {
	if o.KeyHeader == "" {
		o.KeyHeader = core.DefaultKeyHeader
	}
	if o.MaxKeyLength == 0 {
		o.MaxKeyLength = core.DefaultMaxKeyLength
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = core.DefaultMaxBodyBytes
	}
	if o.ResponseTTL == 0 {
		o.ResponseTTL = core.DefaultResponseTTL
	}
	if o.ReplayHeader == "" {
		o.ReplayHeader = core.HeaderReplay
	}
	if o.Storable == nil {
		o.Storable = core.DefaultStorable
	}
	if o.Methods == nil {
		o.Methods = core.DefaultMethods
	}
	return o
}
