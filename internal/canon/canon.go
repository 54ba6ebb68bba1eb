// Package canon puts request bodies in the canonical form that core's
// fingerprint hashes, so that two encodings of the same content count as
// the same request:
//
//   - JSON (application/json or any +json type): object members sorted by
//     key, insignificant whitespace removed, strings and numbers kept as
//     written (1.0 and 1 differ, so do "\u0041" and "A"); a body with an
//     object of two members of one name to encoding/json ("qty" and "QTY":
//     the last one wins, so their order matters), or an object of several
//     members one of whose names holds an escape, is taken raw;
//   - form data (application/x-www-form-urlencoded): the pairs sorted by
//     name (decoded, as a handler reads it), the order of the pairs of one
//     name kept, each pair as written: "x+y" and "x%20y" are one value to
//     a form parser but not to a handler that reads the body as something
//     else (JSON sent with curl -d's default Content-Type, say), so they
//     stay apart; a body that starts as JSON does ({, [ or ", after any
//     whitespace) is taken raw, and so is a body of more pairs than
//     url.ParseQuery accepts (maxFormPairs);
//   - multipart/form-data: the parts without the boundary, which a client
//     draws anew for every attempt (each part's header lines and content),
//     sorted by form name, the order of the parts of one name kept; a body
//     of more than 1000 parts, 4000 part header lines, 8 KiB of
//     Content-Disposition in one part or 64 KiB in all is fingerprinted
//     raw, which bounds the work;
//   - anything else, or a body of those types that does not parse: the raw
//     bytes.
package canon

import (
	"bytes"
	"encoding/binary"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
)

// MediaType returns the media type of a Content-Type, lower-cased, without
// parameters: "application/json; charset=utf-8" is "application/json".
func MediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// Body returns the canonical form of body, of Content-Type contentType
// and media type mt (MediaType), and whether it is one (false: the raw
// bytes). The canonical form of JSON is appended to dst, which may be nil:
// a caller that hashes it and lets it go can pass a buffer of its own.
func Body(dst []byte, contentType, mt string, body []byte) ([]byte, bool) {
	if len(body) == 0 {
		return body, false
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		if c, ok := canonicalJSON(dst, body); ok {
			return c, true
		}
	case mt == "application/x-www-form-urlencoded":
		if c, ok := canonicalForm(body); ok {
			return c, true
		}
	case mt == "multipart/form-data":
		if c, ok := canonicalMultipart(contentType, body); ok {
			return c, true
		}
	}
	return body, false
}

// maxFormPairs is the most &-separated pieces a form body put in canonical
// form may have: url.ParseQuery's default limit (GODEBUG urlmaxqueryparams),
// past which it refuses the body, and so does a handler's r.ParseForm. A
// pair costs a 48-byte entry and its share of a sort: a body of a million
// one-letter pairs cost 35 to 85 times its size in memory and hundreds of
// times ParseQuery's refusal in CPU.
const maxFormPairs = 10000

// canonicalForm returns the canonical form of a form body (see the
// package doc), or false if it has no pairs, does not parse as
// url.ParseQuery would (a semicolon, a bad escape, more than maxFormPairs
// pieces), or starts as JSON does ({, [ or ", after any whitespace):
// sorting the &-separated pieces of a JSON document would merge documents
// that differ, such as two URLs in a string whose query parameters come in
// another order.
func canonicalForm(body []byte) ([]byte, bool) {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[' || t[0] == '"') {
		return nil, false
	}
	n := bytes.Count(body, []byte("&")) + 1 // as url.ParseQuery counts them, empty ones included
	if n > maxFormPairs {
		return nil, false
	}
	type pair struct{ name, raw []byte }
	pairs := make([]pair, 0, n)
	for rest := body; len(rest) > 0; {
		var raw []byte
		raw, rest, _ = bytes.Cut(rest, []byte("&"))
		if len(raw) == 0 {
			continue // "a=1&&b=2": no pair, for url.ParseQuery too
		}
		name, value, _ := bytes.Cut(raw, []byte("="))
		if bytes.IndexByte(raw, ';') >= 0 || !validEscapes(value) {
			return nil, false
		}
		if bytes.ContainsAny(name, "%+") {
			n, err := url.QueryUnescape(string(name))
			if err != nil {
				return nil, false
			}
			name = []byte(n)
		}
		pairs = append(pairs, pair{name, raw})
	}
	if len(pairs) == 0 {
		return nil, false
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return bytes.Compare(a.name, b.name) })
	c := make([]byte, 0, len(body))
	for i, p := range pairs {
		if i > 0 {
			c = append(c, '&')
		}
		c = append(c, p.raw...)
	}
	return c, true
}

// validEscapes reports whether every % in b starts an escape of two hex
// digits, as url.QueryUnescape requires.
func validEscapes(b []byte) bool {
	for i := bytes.IndexByte(b, '%'); i >= 0; i = bytes.IndexByte(b, '%') {
		if i+2 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) {
			return false
		}
		b = b[i+3:]
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Bounds of the multipart bodies put in canonical form: each part costs a
// header map, each header line a map entry, each Content-Disposition
// parameter a map entry too, and a hostile body of empty parts, one-letter
// headers or parameters would otherwise cost 20 to 100 times its size. Past
// them the body is fingerprinted raw (a retry that rebuilds it then gets
// 422, never another request's replay).
const (
	maxMultipartParts            = 1000
	maxMultipartHeaders          = 4 * maxMultipartParts // header lines, all parts together
	maxMultipartDisposition      = 8 << 10               // bytes of one part's Content-Disposition (a long UTF-8 file name fits)
	maxMultipartDispositionTotal = 64 << 10              // bytes of all parts' Content-Disposition together
)

// canonicalMultipart returns the canonical form of a multipart/form-data
// body (see the package doc), or false if it has no parts, too many, or does
// not parse.
func canonicalMultipart(contentType string, body []byte) ([]byte, bool) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil || params["boundary"] == "" {
		return nil, false
	}
	type part struct {
		name       string
		start, end int // its encoding in enc
	}
	var (
		parts        []part
		headers      int                          // header lines so far
		dispositions int                          // bytes of Content-Disposition so far
		enc          = make([]byte, 0, len(body)) // the parts' encodings, in body order
		content      bytes.Buffer                 // one part's content, reused
	)
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := r.NextRawPart() // raw: the bytes as sent, no decoding
		if err == io.EOF {
			break
		}
		if err != nil || len(parts) == maxMultipartParts {
			return nil, false
		}
		for _, v := range p.Header {
			headers += len(v)
		}
		if headers > maxMultipartHeaders {
			return nil, false
		}
		disposition, contentType, rest := partHeaders(p.Header)
		dispositions += len(disposition)
		if len(disposition) > maxMultipartDisposition || dispositions > maxMultipartDispositionTotal {
			return nil, false
		}
		content.Reset()
		if _, err := content.ReadFrom(p); err != nil {
			return nil, false
		}
		start := len(enc)
		enc = appendField(enc, disposition)
		enc = appendField(enc, contentType)
		enc = appendField(enc, rest)
		enc = binary.AppendUvarint(enc, uint64(content.Len()))
		enc = append(enc, content.Bytes()...)
		parts = append(parts, part{p.FormName(), start, len(enc)})
	}
	if len(parts) == 0 {
		return nil, false // not what the Content-Type says: the raw bytes
	}
	slices.SortStableFunc(parts, func(a, b part) int { return strings.Compare(a.name, b.name) })
	c := make([]byte, 0, len(enc))
	for _, p := range parts {
		c = append(c, enc[p.start:p.end]...)
	}
	return c, true
}

// partHeaders returns a part's header lines as canonicalMultipart encodes
// them: every line of Content-Disposition, of Content-Type, and of
// Content-Transfer-Encoding followed by the other headers' (the parser
// hands them all to the handler, multipart.FileHeader.Header), names
// sorted, but Content-Length, which the content's own length says. Lines
// of one header are joined by "\n", each other header's is
// "\r"+name+":"+value: no header value holds either, so no two sets of
// lines join alike; a part of the three single-line headers (and a
// Content-Length) encodes as their values, as before the others joined.
func partHeaders(h textproto.MIMEHeader) (disposition, contentType, rest string) {
	disposition = strings.Join(h["Content-Disposition"], "\n")
	contentType = strings.Join(h["Content-Type"], "\n")
	rest = strings.Join(h["Content-Transfer-Encoding"], "\n")
	var others []string
	for name := range h {
		if name != "Content-Disposition" && name != "Content-Type" && name != "Content-Transfer-Encoding" && name != "Content-Length" {
			others = append(others, name)
		}
	}
	if others == nil {
		return disposition, contentType, rest
	}
	slices.Sort(others)
	var b strings.Builder
	b.WriteString(rest)
	for _, name := range others {
		for _, v := range h[name] {
			b.WriteString("\r" + name + ":")
			b.WriteString(v)
		}
	}
	return disposition, contentType, b.String()
}

// appendField appends s, length-prefixed.
func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
