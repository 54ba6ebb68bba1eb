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

// parseKey turns a raw header value into a key. The value is a Structured
// Field Item (RFC 8941): a String ("abc"), unquoted, whose parameters
// (;p=1) are ignored; or, as clients send it most often, a bare value,
// taken as it is. Spaces and tabs around it are dropped. A comma outside a
// String means a list of keys (a proxy may join field lines with commas,
// RFC 9110) and fails, as does a String that does not parse. Then the
// default rules apply: 1 to maxLen characters of printable ASCII.
func parseKey(raw string, maxLen int) (string, error) {
	key := strings.Trim(raw, " \t")
	if strings.HasPrefix(key, `"`) {
		var rest string
		var err error
		if key, rest, err = parseSFString(key); err != nil {
			return "", err
		}
		if err := skipSFParams(rest); err != nil {
			return "", err
		}
	} else if strings.IndexByte(key, ',') >= 0 {
		return "", errors.New("several keys in one header (a comma-separated list): want one")
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

// parseSFString parses the RFC 8941 String at the start of s and returns
// its value and what follows it.
func parseSFString(s string) (value, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return b.String(), s[i+1:], nil
		case c == '\\':
			if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", "", errors.New(`bad escape in a quoted key: only \" and \\ are allowed`)
			}
			i++
			b.WriteByte(s[i])
		case c < 0x20 || c > 0x7e:
			return "", "", fmt.Errorf("byte %#x in a quoted key: want printable ASCII", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("quoted key without its closing quote")
}

// skipSFParams checks that s holds only the parameters of an Item
// (;key=bare-item ...), which the key ignores.
func skipSFParams(s string) error {
	for s != "" {
		if s[0] != ';' {
			if s[0] == ',' {
				return errors.New("several keys in one header (a comma-separated list): want one")
			}
			return fmt.Errorf("%q after a quoted key: want nothing or ;parameters", s)
		}
		s = strings.TrimLeft(s[1:], " ")
		n := 0
		for n < len(s) && (s[n] >= 'a' && s[n] <= 'z' || s[n] == '*' || n > 0 && (s[n] >= '0' && s[n] <= '9' || strings.IndexByte("_-.", s[n]) >= 0)) {
			n++
		}
		if n == 0 {
			return errors.New("bad parameter name after a quoted key")
		}
		s = s[n:]
		if s == "" || s[0] != '=' {
			continue // a boolean parameter, true
		}
		var err error
		if s, err = skipSFBareItem(s[1:]); err != nil {
			return err
		}
	}
	return nil
}

// skipSFBareItem skips the bare item (a parameter's value) at the start of
// s: a number, String, Token, Byte Sequence or Boolean.
func skipSFBareItem(s string) (string, error) {
	bad := errors.New("bad parameter value after a quoted key")
	switch {
	case s == "":
		return "", bad
	case s[0] == '"':
		_, rest, err := parseSFString(s)
		return rest, err
	case s[0] == '?':
		if len(s) < 2 || s[1] != '0' && s[1] != '1' {
			return "", bad
		}
		return s[2:], nil
	case s[0] == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 || strings.Trim(s[1:end+1], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != "" {
			return "", bad
		}
		return s[end+2:], nil
	case s[0] == '-' || s[0] >= '0' && s[0] <= '9':
		i := 0
		if s[0] == '-' {
			i++
		}
		start, dot := i, -1
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' && dot < 0) {
			if s[i] == '.' {
				dot = i
			}
			i++
		}
		digits := i - start
		switch {
		case digits == 0, dot < 0 && digits > 15, dot >= 0 && (dot-start > 12 || i-dot-1 < 1 || i-dot-1 > 3):
			return "", bad
		}
		return s[i:], nil
	case s[0] == '*' || s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z':
		i := 1
		for i < len(s) && (isTChar(s[i]) || s[i] == ':' || s[i] == '/') {
			i++
		}
		return s[i:], nil
	}
	return "", bad
}

// isTChar reports whether c is a token character (RFC 9110).
func isTChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
