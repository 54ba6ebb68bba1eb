// Package idemkey holds validators of idempotency key formats, for
// core.Config.ValidateKey, and the structured key format
// {userId}:{operation}:{resourceId}:{clientTimestamp}. A validator returns a
// descriptive error; the Engine wraps it with core.ErrInvalidKey. The
// default rules (1 to MaxKeyLength printable ASCII characters) always apply
// first.
package idemkey

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// UUID accepts a UUID of any version in its canonical 36-character
// form (8-4-4-4-12 hex digits).
func UUID(key string) error {
	_, err := parseCanonicalUUID(key)
	return err
}

// UUIDv4 accepts only a canonical random (version 4) UUID.
func UUIDv4(key string) error {
	u, err := parseCanonicalUUID(key)
	if err != nil {
		return err
	}
	if u.Version() != 4 || u.Variant() != uuid.RFC4122 {
		return fmt.Errorf("not a version 4 UUID (version %d, variant %s)", u.Version(), u.Variant())
	}
	return nil
}

func parseCanonicalUUID(key string) (uuid.UUID, error) {
	if len(key) != 36 {
		return uuid.UUID{}, errors.New("not a UUID: want 36 characters like 123e4567-e89b-42d3-a456-426614174000")
	}
	u, err := uuid.Parse(key)
	if err != nil {
		return uuid.UUID{}, fmt.Errorf("not a UUID: %w", err)
	}
	return u, nil
}

// Token accepts 16 to 255 characters from [A-Za-z0-9_-].
func Token(key string) error {
	if len(key) < 16 || len(key) > 255 {
		return fmt.Errorf("want 16 to 255 characters, got %d", len(key))
	}
	for i := 0; i < len(key); i++ {
		if !isTokenChar(key[i]) {
			return fmt.Errorf("character %q at %d: want A-Z, a-z, 0-9, _ or -", key[i], i)
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// Structured is the key format {userId}:{operation}:{resourceId}:{clientTimestamp}
// that ties a key to who does what to which resource, and when the client
// first tried. The timestamp is Unix milliseconds. The other parts hold
// characters from [A-Za-z0-9_.-].
type Structured struct {
	UserID     string
	Operation  string
	ResourceID string
	ClientTime time.Time
}

// String formats k; a client sends the same string on every retry. It does
// not validate k: a part with other characters, or a ClientTime at or before
// the Unix epoch (the zero time.Time), makes a key that ValidateStructured
// refuses.
func (k Structured) String() string {
	return k.UserID + ":" + k.Operation + ":" + k.ResourceID + ":" + strconv.FormatInt(k.ClientTime.UnixMilli(), 10)
}

// ParseStructured parses and validates a key in the Structured format.
func ParseStructured(key string) (Structured, error) {
	parts := strings.Split(key, ":")
	if len(parts) != 4 {
		return Structured{}, fmt.Errorf("want userId:operation:resourceId:clientTimestamp, got %d parts", len(parts))
	}
	for i, name := range [...]string{"userId", "operation", "resourceId"} {
		if parts[i] == "" {
			return Structured{}, fmt.Errorf("empty %s", name)
		}
		for j := 0; j < len(parts[i]); j++ {
			if c := parts[i][j]; !isTokenChar(c) && c != '.' {
				return Structured{}, fmt.Errorf("character %q in %s: want A-Z, a-z, 0-9, _, . or -", c, name)
			}
		}
	}
	ms, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || ms <= 0 {
		return Structured{}, fmt.Errorf("clientTimestamp %q: want Unix milliseconds", parts[3])
	}
	return Structured{UserID: parts[0], Operation: parts[1], ResourceID: parts[2], ClientTime: time.UnixMilli(ms)}, nil
}

// ValidateStructured accepts keys in the Structured format.
func ValidateStructured(key string) error {
	_, err := ParseStructured(key)
	return err
}
