package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"mime"
	"net/url"
	"strings"
)

// fingerprint is the SHA-256 over the parts of a request that make two
// requests with one key "the same request": the method, the route template,
// the canonical body and the critical headers. Every part is length-prefixed,
// so no two different requests hash the same input.
func fingerprint(method, route, contentType string, body []byte, critical []string, header HeaderGetter) [32]byte {
	h := sha256.New()
	writeField(h, method)
	writeField(h, route)
	writeField(h, string(CanonicalBody(contentType, body)))
	for _, name := range critical {
		writeField(h, name)
		writeField(h, header.Get(name))
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

func writeField(h hash.Hash, s string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	h.Write([]byte(s))
}

// CanonicalBody returns the form of body that the fingerprint hashes, so
// that two encodings of the same content count as the same request:
//
//   - JSON (application/json or any +json type): object keys sorted,
//     insignificant whitespace removed, numbers kept as written;
//   - form data (application/x-www-form-urlencoded): keys sorted, the order
//     of the values of one key kept;
//   - anything else, or a JSON or form body that does not parse: the raw bytes.
func CanonicalBody(contentType string, body []byte) []byte {
	if len(body) == 0 || contentType == "" {
		return body
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
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
	}
	return body
}

// canonicalJSON decodes body with numbers kept as their literal text and
// encodes it again: encoding/json writes object keys sorted and no
// whitespace. It reports false for anything but exactly one JSON value.
func canonicalJSON(body []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) != 0 {
		return nil, false
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, false
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), true
}
