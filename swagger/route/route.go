// Package route describes the routes an idem middleware covers, for the
// OpenAPI emitter (package swagger): each adapter's Operations lists them
// with it. It has no dependency beyond the standard library, so importing
// an adapter does not compile swagger's YAML parser.
package route

import (
	"errors"
	"path"
	"slices"
	"strings"
)

// Operation is one covered route: a method and a path.
type Operation struct {
	// Method is the HTTP method; empty means every method in
	// swagger.Options.Methods (a net/http pattern without a method).
	Method string
	// Path is the full route path, in OpenAPI syntax (/orders/{id}) or a
	// router's (/orders/:id, /files/*path, /files/{path...}).
	Path string
}

// Sort sorts ops by path, then method, and drops duplicates (a
// route a router lists twice), in place: every adapter reports its routes in
// this one order, whatever order its router keeps them in.
func Sort(ops []Operation) []Operation {
	slices.SortFunc(ops, func(a, b Operation) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return slices.Compact(ops)
}

// Parse parses "METHOD /path" or "/path", the form of a Go 1.22
// http.ServeMux pattern (a host before the path is ignored).
func Parse(s string) (Operation, error) {
	f := strings.Fields(s)
	switch len(f) {
	case 1:
		return Operation{Path: f[0]}, nil
	case 2:
		return Operation{Method: strings.ToUpper(f[0]), Path: f[1]}, nil
	}
	return Operation{}, errors.New(`route: operation: want "METHOD /path", got "` + s + `"`)
}

// Normalize converts a route path from a router's syntax to OpenAPI
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
func Normalize(p string) string {
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

// Key reduces an OpenAPI path template to the form routes are matched in:
// parameter names dropped, cleaned, without a trailing slash.
func Key(p string) string {
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
