package core

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidKey reports an idempotency key that is empty, too long, holds
// characters other than printable ASCII, or fails the configured validator.
var ErrInvalidKey = errors.New("idem: invalid idempotency key")

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
// its value and what follows it. The value is a substring of s unless it
// holds an escape: then it is built once, at its length.
func parseSFString(s string) (value, rest string, err error) {
	end, escaped, err := scanSFString(s)
	if err != nil {
		return "", "", err
	}
	if !escaped {
		return s[1:end], s[end+1:], nil
	}
	var b strings.Builder
	b.Grow(end - 1)
	for i := 1; i < end; i++ {
		if s[i] == '\\' {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String(), s[end+1:], nil
}

// scanSFString checks the RFC 8941 String at the start of s and returns
// the index of its closing quote and whether it holds an escape. It
// allocates nothing but an error: a key header of a million parameters
// costs no more than its bytes.
func scanSFString(s string) (end int, escaped bool, err error) {
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i, escaped, nil
		case c == '\\':
			if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return 0, false, errors.New(`bad escape in a quoted key: only \" and \\ are allowed`)
			}
			i++
			escaped = true
		case c < 0x20 || c > 0x7e:
			return 0, false, fmt.Errorf("byte %#x in a quoted key: want printable ASCII", c)
		}
	}
	return 0, false, errors.New("quoted key without its closing quote")
}

// skipSFParams checks that s holds only the parameters of an Item
// (;key=bare-item ...), which the key ignores.
func skipSFParams(s string) error {
	for s != "" {
		if s[0] != ';' {
			if s[0] == ',' {
				return errors.New("several keys in one header (a comma-separated list): want one")
			}
			// Not quoted: the header may be as long as the server allows,
			// and the error reaches the problem detail and the logs.
			return fmt.Errorf("%d bytes after a quoted key: want nothing or ;parameters", len(s))
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

// errBadParam is the error of a parameter's malformed value: one value,
// not one allocated for every parameter a header holds.
var errBadParam = errors.New("bad parameter value after a quoted key")

// skipSFBareItem skips the bare item (a parameter's value) at the start of
// s: a number, String, Token, Byte Sequence or Boolean.
func skipSFBareItem(s string) (string, error) {
	switch {
	case s == "":
		return "", errBadParam
	case s[0] == '"':
		end, _, err := scanSFString(s)
		if err != nil {
			return "", err
		}
		return s[end+1:], nil
	case s[0] == '?':
		if len(s) < 2 || s[1] != '0' && s[1] != '1' {
			return "", errBadParam
		}
		return s[2:], nil
	case s[0] == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 || strings.Trim(s[1:end+1], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != "" {
			return "", errBadParam
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
			return "", errBadParam
		}
		return s[i:], nil
	case s[0] == '*' || s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z':
		i := 1
		for i < len(s) && (isTChar(s[i]) || s[i] == ':' || s[i] == '/') {
			i++
		}
		return s[i:], nil
	}
	return "", errBadParam
}

// isTChar reports whether c is a token character (RFC 9110).
func isTChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
