package core

import (
	"crypto/sha256"
	"encoding/binary"
	"net/url"
	"strings"
	"sync"

	"github.com/idem-go/idem/internal/canon"
)

// fingerprint is the SHA-256 over the parts of a request that make two
// requests with one key "the same request": the method, the path (not the
// route template: one key sent to /orders/1/refunds and to
// /orders/2/refunds is a key reused on another resource, refused with 422,
// never a replay of the other order's refund), the query (parameters
// sorted), the body's media type and Content-Encoding if there is a body
// (they say what the body means: a handler may refuse one media type and
// accept the other, and a framework may decompress), the canonical body
// (tagged canonical or raw, so that raw bytes never meet another body's
// canonical form) and the critical headers, every line of them. Every part
// is length-prefixed, so no two different requests hash the same input.
func fingerprint(method, path, query, contentType string, body []byte, critical []string, header HeaderGetter) [32]byte {
	var mt, encoding string // the media type and content coding of a body; none without one
	if len(body) > 0 {
		mt = canon.MediaType(contentType)
		// Every line, as sent (no header value holds a newline): a framework
		// may decode the first line only (Fiber) or the last.
		encoding = strings.Join(headerValues(header, "Content-Encoding"), "\n")
	}
	buf := canonBuffers.Get().(*[]byte)
	defer putCanonBuffer(buf)
	body, canonical := canon.Body((*buf)[:0], contentType, mt, body)
	if canonical {
		*buf = body
	}
	if query != "" {
		if v, err := url.ParseQuery(query); err == nil {
			query = v.Encode()
		}
	}
	// The fields around the body are small: one buffer, hashed before and
	// after the body, which is hashed where it is rather than copied.
	var fields [256]byte
	b := fields[:0]
	b = appendField(b, method)
	b = appendField(b, path)
	b = appendField(b, query)
	b = appendField(b, mt)
	b = appendField(b, encoding)
	if canonical {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(body)))
	h := sha256.New()
	h.Write(b)
	h.Write(body)
	b = b[:0]
	for _, name := range critical {
		b = appendField(b, name)
		b = appendField(b, strings.Join(header.Values(name), "\n")) // its name hashed as configured; every line, as above
	}
	h.Write(b)
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// hostFingerprint is the fingerprint of a request that a router sent to
// its handler by host (Request.Host) as well as by path: fp and the host,
// hashed again, so that every other request's fingerprint stays as it was.
func hostFingerprint(fp [32]byte, host string) [32]byte {
	return sha256.Sum256(append(fp[:], host...))
}

// routedFingerprint joins to fp the path a request was routed on, when a
// handler before the middleware rewrote the path sent (Request.routed). A
// host has no NUL: the two never hash alike.
func routedFingerprint(fp [32]byte, routed string) [32]byte {
	return sha256.Sum256(append(append(fp[:], 0), routed...))
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// canonBuffers hold the canonical form of a body while fingerprint hashes
// it.
var canonBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxKeptCanonBuffer bounds the buffer putCanonBuffer keeps for the next
// request: a large body's is let go.
const maxKeptCanonBuffer = 64 << 10

func putCanonBuffer(b *[]byte) {
	if cap(*b) <= maxKeptCanonBuffer {
		canonBuffers.Put(b)
	}
}
