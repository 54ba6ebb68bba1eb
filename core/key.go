package core

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ErrInvalidKey reports an idempotency key that is empty, too long, holds
// characters other than printable ASCII, or fails the configured validator.
var ErrInvalidKey = errors.New("idem: invalid idempotency key")

// A KeyValidator checks a key beyond the default rules (1 to MaxKeyLength
// printable ASCII characters), which always apply first. It returns a
// descriptive error; the Engine wraps it with ErrInvalidKey.
type KeyValidator func(key string) error

// ValidateUUID accepts a UUID of any version in its canonical 36-character
// form (8-4-4-4-12 hex digits).
func ValidateUUID(key string) error {
	_, err := parseCanonicalUUID(key)
	return err
}

// ValidateUUIDv4 accepts only a canonical random (version 4) UUID.
func ValidateUUIDv4(key string) error {
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

// ValidateToken accepts 16 to 255 characters from [A-Za-z0-9_-].
func ValidateToken(key string) error {
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

// StructuredKey is the key format {userId}:{operation}:{resourceId}:{clientTimestamp}
// that ties a key to who does what to which resource, and when the client
// first tried. The timestamp is Unix milliseconds. The other parts hold
// characters from [A-Za-z0-9_.-].
type StructuredKey struct {
	UserID     string
	Operation  string
	ResourceID string
	ClientTime time.Time
}

// String formats k; a client sends the same string on every retry.
func (k StructuredKey) String() string {
	return k.UserID + ":" + k.Operation + ":" + k.ResourceID + ":" + strconv.FormatInt(k.ClientTime.UnixMilli(), 10)
}

// ParseStructuredKey parses and validates a key in the StructuredKey format.
func ParseStructuredKey(key string) (StructuredKey, error) {
	parts := strings.Split(key, ":")
	if len(parts) != 4 {
		return StructuredKey{}, fmt.Errorf("want userId:operation:resourceId:clientTimestamp, got %d parts", len(parts))
	}
	for i, name := range [...]string{"userId", "operation", "resourceId"} {
		if parts[i] == "" {
			return StructuredKey{}, fmt.Errorf("empty %s", name)
		}
		for j := 0; j < len(parts[i]); j++ {
			if c := parts[i][j]; !isTokenChar(c) && c != '.' {
				return StructuredKey{}, fmt.Errorf("character %q in %s: want A-Z, a-z, 0-9, _, . or -", c, name)
			}
		}
	}
	ms, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || ms <= 0 {
		return StructuredKey{}, fmt.Errorf("clientTimestamp %q: want Unix milliseconds", parts[3])
	}
	return StructuredKey{UserID: parts[0], Operation: parts[1], ResourceID: parts[2], ClientTime: time.UnixMilli(ms)}, nil
}

// ValidateStructuredKey accepts keys in the StructuredKey format.
func ValidateStructuredKey(key string) error {
	_, err := ParseStructuredKey(key)
	return err
}

// parseKey turns a raw header value into a key: spaces and tabs around it
// are dropped (they are not part of a field value, RFC 9110, though not
// every server drops them), a quoted structured-field string (RFC 8941,
// "abc") is unquoted, then the default rules apply: 1 to maxLen characters
// of printable ASCII (0x20 to 0x7E).
func parseKey(raw string, maxLen int) (string, error) {
	raw = strings.Trim(raw, " \t")
	key := raw
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		var err error
		if key, err = unquoteSFString(raw[1 : len(raw)-1]); err != nil {
			return "", err
		}
	}
	if key == "" {
		return "", errors.New("empty key")
	}
	if len(key) > maxLen {
		return "", fmt.Errorf("key is %d bytes long, the limit is %d", len(key), maxLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("byte %#x at %d: want printable ASCII", c, i)
		}
	}
	return key, nil
}

// unquoteSFString undoes the escapes of an RFC 8941 string: only \" and \\.
func unquoteSFString(s string) (string, error) {
	if !strings.ContainsAny(s, `\"`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return "", errors.New("unescaped quote inside a quoted key")
		case '\\':
			if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", errors.New(`bad escape in a quoted key: only \" and \\ are allowed`)
			}
			i++
			b.WriteByte(s[i])
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
