package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"slices"
	"strings"
)

// fingerprint is the SHA-256 over the parts of a request that make two
// requests with one key "the same request": the method, the path (not the
// route template: one key sent to /orders/1/refunds and to
// /orders/2/refunds is a key reused on another resource, refused with 422,
// never a replay of the other order's refund), the query (parameters
// sorted), the body's media type if there is a body (it says what the body
// means: a handler may refuse one and accept the other), the canonical body
// and the critical headers. Every part is length-prefixed, so no two
// different requests hash the same input.
func fingerprint(method, path, query, contentType string, body []byte, critical []string, header HeaderGetter) [32]byte {
	var mt string // the media type of a body; none without one
	if len(body) > 0 {
		mt = mediaType(contentType)
	}
	canon := canonicalBody(contentType, mt, body)
	if query != "" {
		if v, err := url.ParseQuery(query); err == nil {
			query = v.Encode()
		}
	}
	b := make([]byte, 0, len(method)+len(path)+len(query)+len(mt)+len(canon)+64)
	b = appendField(b, method)
	b = appendField(b, path)
	b = appendField(b, query)
	b = appendField(b, mt)
	b = binary.AppendUvarint(b, uint64(len(canon)))
	b = append(b, canon...)
	for _, name := range critical {
		b = appendField(b, name)
		b = appendField(b, header.Get(name))
	}
	return sha256.Sum256(b)
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// CanonicalBody returns the form of body that the fingerprint hashes, so
// that two encodings of the same content count as the same request:
//
//   - JSON (application/json or any +json type): object members sorted by
//     key, insignificant whitespace removed, strings and numbers kept as
//     written (1.0 and 1 differ, so do "\u0041" and "A");
//   - form data (application/x-www-form-urlencoded): keys sorted, the order
//     of the values of one key kept;
//   - multipart/form-data: the parts without the boundary, which a client
//     draws anew for every attempt (each part's form name, file name,
//     Content-Type and content), sorted by form name, the order of the
//     parts of one name kept;
//   - anything else, or a body of those types that does not parse: the raw
//     bytes.
func CanonicalBody(contentType string, body []byte) []byte {
	return canonicalBody(contentType, mediaType(contentType), body)
}

// mediaType returns the media type of a Content-Type, lower-cased, without
// parameters: "application/json; charset=utf-8" is "application/json".
func mediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

func canonicalBody(contentType, mt string, body []byte) []byte {
	if len(body) == 0 {
		return body
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		if c, ok := canonicalJSON(body); ok {
			return c
		}
	case mt == "application/x-www-form-urlencoded":
		if v, err := url.ParseQuery(string(body)); err == nil {
			return []byte(v.Encode())
		}
	case mt == "multipart/form-data":
		if c, ok := canonicalMultipart(contentType, body); ok {
			return c
		}
	}
	return body
}

// canonicalMultipart returns the canonical form of a multipart/form-data
// body (see CanonicalBody), or false if it has no parts or does not parse.
func canonicalMultipart(contentType string, body []byte) ([]byte, bool) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil || params["boundary"] == "" {
		return nil, false
	}
	type part struct {
		name string
		enc  []byte // length-prefixed form name, file name, Content-Type, content
	}
	var parts []part
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false
		}
		content, err := io.ReadAll(p)
		if err != nil {
			return nil, false
		}
		enc := appendField(nil, p.FormName())
		enc = appendField(enc, p.FileName())
		enc = appendField(enc, p.Header.Get("Content-Type"))
		enc = binary.AppendUvarint(enc, uint64(len(content)))
		parts = append(parts, part{p.FormName(), append(enc, content...)})
	}
	if len(parts) == 0 {
		return nil, false // not what the Content-Type says: the raw bytes
	}
	slices.SortStableFunc(parts, func(a, b part) int { return strings.Compare(a.name, b.name) })
	c := make([]byte, 0, len(body))
	for _, p := range parts {
		c = append(c, p.enc...)
	}
	return c, true
}
