package canon

import (
	"bytes"
	"math"
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting canonicalJSON follows; deeper documents are
// fingerprinted as raw bytes. It bounds the stack, and the copying of a body
// whose every level is an object with members out of order (at most
// maxJSONDepth copies of the body); request bodies of APIs nest far less.
const maxJSONDepth = 64

// canonicalJSON returns the canonical form of one JSON value: object members
// sorted by key (byte order of the key as written), no insignificant
// whitespace, strings and numbers kept as written. It reports false for
// anything that is not exactly one valid JSON value, and for an object
// with two members of one name to encoding/json (see object). It is a
// small single-pass parser rather than a decode into map[string]any and
// back, which costs dozens of allocations per request. It appends the
// canonical form to dst.
func canonicalJSON(dst, body []byte) ([]byte, bool) {
	if len(dst)+len(body) > math.MaxInt32 { // beyond a member's offsets
		return nil, false
	}
	p := parsers.Get().(*jsonCanon)
	defer p.release()
	p.in, p.pos = body, 0
	out, ok := p.value(slices.Grow(dst, len(body)), 0)
	if !ok {
		return nil, false
	}
	p.ws()
	return out, p.pos == len(p.in)
}

// parsers keep the buffers of a canonicalJSON call for the next one.
var parsers = sync.Pool{New: func() any { return new(jsonCanon) }}

// maxKeptScratch bounds the buffer a parser keeps in parsers: a large
// body's is let go.
const maxKeptScratch = 64 << 10

// release puts p back in parsers, holding no reference to the body.
func (p *jsonCanon) release() {
	p.in = nil
	clear(p.names[:cap(p.names)]) // members hold offsets, no references
	p.members, p.names = p.members[:0], p.names[:0]
	if cap(p.scratch) > maxKeptScratch || cap(p.folded) > maxKeptScratch || cap(p.members) > maxKeptScratch/16 {
		return
	}
	parsers.Put(p)
}

type jsonCanon struct {
	in      []byte
	pos     int
	members []member // a stack: the members of the objects being read
	scratch []byte   // where an object's members are copied to be sorted
	names   [][]byte // an object's names, folded (sameNames)
	folded  []byte   // the bytes of the folded names
}

func (p *jsonCanon) ws() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonCanon) value(dst []byte, depth int) ([]byte, bool) {
	p.ws()
	if p.pos >= len(p.in) || depth > maxJSONDepth {
		return nil, false
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(dst, depth)
	case c == '[':
		return p.array(dst, depth)
	case c == '"':
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		return append(dst, s...), true
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	default:
		return p.number(dst)
	}
}

func (p *jsonCanon) literal(dst []byte, lit string) ([]byte, bool) {
	if !bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		return nil, false
	}
	p.pos += len(lit)
	return append(dst, lit...), true
}

// number checks the JSON number grammar and copies the number as written.
func (p *jsonCanon) number(dst []byte) ([]byte, bool) {
	start, in := p.pos, p.in
	i := p.pos
	if i < len(in) && in[i] == '-' {
		i++
	}
	digits := func() bool {
		j := i
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
		return i > j
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case !digits():
		return nil, false
	}
	if i < len(in) && in[i] == '.' {
		i++
		if !digits() {
			return nil, false
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if !digits() {
			return nil, false
		}
	}
	p.pos = i
	return append(dst, in[start:i]...), true
}

// str checks a string token and returns it as written, quotes included.
// Strings are not re-encoded: two spellings of one string ("\u0041" and
// "A") stay apart, which no client retrying its own request produces,
// whereas decoding would merge strings that differ (a lone surrogate and
// invalid UTF-8 both decode to U+FFFD).
func (p *jsonCanon) str() ([]byte, bool) {
	start := p.pos
	for i := p.pos + 1; i < len(p.in); i++ {
		switch c := p.in[i]; {
		case c == '"':
			p.pos = i + 1
			return p.in[start:p.pos], true
		case c == '\\':
			i++
			if i == len(p.in) {
				return nil, false
			}
			switch p.in[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(p.in) {
					return nil, false
				}
				for _, h := range p.in[i+1 : i+5] {
					if !isHex(h) {
						return nil, false
					}
				}
				i += 4
			default:
				return nil, false
			}
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (p *jsonCanon) array(dst []byte, depth int) ([]byte, bool) {
	p.pos++ // [
	dst = append(dst, '[')
	p.ws()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		return append(dst, ']'), true
	}
	for {
		var ok bool
		if dst, ok = p.value(dst, depth+1); !ok {
			return nil, false
		}
		p.ws()
		if p.pos >= len(p.in) {
			return nil, false
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			dst = append(dst, ',')
		case ']':
			p.pos++
			return append(dst, ']'), true
		default:
			return nil, false
		}
	}
}

// A member is one "key":value of an object, written to the output at
// [from, to); its key is the input's [k0, k1), as written, quotes
// included. Offsets of 32 bits (canonicalJSON takes larger bodies raw):
// 16 bytes a member, not 40, over a wide object's hundred thousand.
type member struct {
	k0, k1, from, to int32
}

// key returns m's key as written, quotes included.
func (p *jsonCanon) key(m member) []byte { return p.in[m.k0:m.k1] }

// object writes the members to dst in the order they come, and sorts them
// only if they are out of order, through one scratch buffer shared by every
// level: an object's members are never copied once per level of nesting, so
// the work stays linear in the body's size unless a body nests unsorted
// objects, which maxJSONDepth bounds.
//
// An object in which two members have one name to encoding/json (which
// decodes escapes and matches names ignoring case: "qty", "QTY" and
// "\u0071ty") means what its order says, since the last one wins: sorted,
// {"qty":1,"QTY":5} and {"QTY":5,"qty":1} would be one request, whereas a
// handler reads qty 5 from the first and 1 from the second. object reports
// false for it, and the body is fingerprinted raw; so it does for an object
// of several members one of which has an escape in its name, rather than
// decode every name. Some encoders escape names (Python's json.dumps and
// PHP's json_encode escape non-ASCII): their bodies are compared as sent,
// which only means that a retry must resend the same bytes, as retries do.
func (p *jsonCanon) object(dst []byte, depth int) ([]byte, bool) {
	p.pos++ // {
	dst = append(dst, '{')
	p.ws()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		return append(dst, '}'), true
	}
	start, base := len(dst), len(p.members)
	defer func() { p.members = p.members[:base] }()
	sorted, escaped := true, false
	for {
		p.ws()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return nil, false
		}
		key, ok := p.str()
		if !ok {
			return nil, false
		}
		k1 := p.pos
		p.ws()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return nil, false
		}
		p.pos++
		if n := len(p.members); n > base {
			dst = append(dst, ',')
			sorted = sorted && bytes.Compare(p.key(p.members[n-1]), key) <= 0
		}
		from := len(dst)
		dst = append(append(dst, key...), ':')
		if dst, ok = p.value(dst, depth+1); !ok {
			return nil, false
		}
		escaped = escaped || bytes.IndexByte(key, '\\') >= 0
		if len(p.members) == cap(p.members) {
			// Doubled: append grows a large slice by a quarter, which
			// allocates five times the final size over a wide object.
			p.members = slices.Grow(p.members, max(cap(p.members), 16))
		}
		p.members = append(p.members, member{int32(k1 - len(key)), int32(k1), int32(from), int32(len(dst))})
		p.ws()
		if p.pos >= len(p.in) {
			return nil, false
		}
		if c := p.in[p.pos]; c == ',' {
			p.pos++
			continue
		} else if c != '}' {
			return nil, false
		}
		p.pos++
		break
	}
	if ms := p.members[base:]; len(ms) > 1 && (escaped || p.sameNames(ms)) {
		return nil, false
	}
	if !sorted {
		ms := p.members[base:]
		// Their names differ (sameNames): an unstable sort orders them alike.
		slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(p.key(a), p.key(b)) })
		p.scratch = append(p.scratch[:0], dst[start:]...)
		dst = dst[:start]
		for i, m := range ms {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, p.scratch[int(m.from)-start:int(m.to)-start]...)
		}
	}
	return append(dst, '}'), true
}

// sameNames reports whether two of ms, whose keys have no escapes, have
// one name to encoding/json: equal under Unicode simple case folding, as
// bytes.EqualFold compares. Each name is folded once (appendFolded), into
// one buffer, and the folded names are compared as bytes: folding them anew
// at every comparison of a sort made a 1 MiB object of non-ASCII names cost
// seconds of CPU.
func (p *jsonCanon) sameNames(ms []member) bool {
	total := 0
	for _, m := range ms {
		total += int(m.k1 - m.k0)
	}
	p.folded, p.names = slices.Grow(p.folded[:0], total), slices.Grow(p.names[:0], len(ms))
	for _, m := range ms {
		start := len(p.folded)
		p.folded = appendFolded(p.folded, p.in[m.k0+1:m.k1-1]) // its name: the key without the quotes
		p.names = append(p.names, p.folded[start:len(p.folded):len(p.folded)])
	}
	if len(ms) <= 16 {
		for i := 1; i < len(p.names); i++ {
			for j := range i {
				if bytes.Equal(p.names[i], p.names[j]) {
					return true
				}
			}
		}
		return false
	}
	slices.SortFunc(p.names, bytes.Compare)
	for i := 1; i < len(p.names); i++ {
		if bytes.Equal(p.names[i-1], p.names[i]) {
			return true
		}
	}
	return false
}

// appendFolded appends b with each rune replaced by the smallest rune of
// its case-folding orbit (an invalid byte by utf8.RuneError), as
// encoding/json folds names: two names fold alike exactly when
// bytes.EqualFold(a, b).
func appendFolded(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		if c := b[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		dst = utf8.AppendRune(dst, least)
		i += n
	}
	return dst
}
