package core

import (
	"context"
	"crypto/sha256"

	"github.com/google/uuid"
)

// DerivedKey returns the idempotency key that work running under ctx's key
// sends to another service for label: the same on every run of the work,
// in any process, and distinct per scope, key (and route, with
// Config.ScopeRoute) and label. It is a version 8 UUID (RFC 9562) made of
// a SHA-256 of them, so it passes idemkey.UUID and idemkey.Token, and
// reveals nothing of the key. ok is false when ctx runs under no key.
//
// idemclient.Transport and grpcidem's client interceptor send it (label:
// the method, host and path) when the request carries no key of its own.
// Docs: docs/steps.md.
func DerivedKey(ctx context.Context, label string) (key string, ok bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	if !ok {
		return "", false
	}
	h := sha256.New()
	h.Write([]byte("idem derived key\x00"))
	h.Write([]byte(l.id)) // 64 hex digits: no separator needed
	h.Write([]byte(label))
	var u uuid.UUID
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // variant RFC 9562
	return u.String(), true
}
