package canon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestCanonicalBody(t *testing.T) {
	tests := []struct {
		name, contentType, a, b string
		same                    bool
	}{
		{"json key order", "application/json", `{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`, true},
		{"json whitespace", "application/json; charset=utf-8", `{"a":{"x":1,"y":2}}`, "{\n \"a\" : { \"y\":2, \"x\":1 }\n}\n", true},
		{"json +json type", "application/merge-patch+json", `{"a":1,"b":2}`, `{"b":2,"a":1}`, true},
		{"json values differ", "application/json", `{"a":1}`, `{"a":2}`, false},
		{"json array order matters", "application/json", `[1,2]`, `[2,1]`, false},
		{"json number text kept", "application/json", `{"a":1.0}`, `{"a":1}`, false},
		{"json strings kept as written", "application/json", `{"a":"<b>"}`, `{"a":"\u003cb\u003e"}`, false},
		{"json lone surrogates differ", "application/json", `{"a":"\ud800"}`, `{"a":"\udfff"}`, false},
		{"json invalid UTF-8 differs", "application/json", "{\"a\":\"\xff\"}", "{\"a\":\"\xfe\"}", false},
		{"json escaped key alone sorted", "application/json", `{"a":{"\u0062":1},"c":2}`, `{"c":2,"a":{"\u0062":1}}`, true},
		{"json escaped key among others is raw", "application/json", `{"\u0062":1,"a":2}`, `{"a":2,"\u0062":1}`, false},
		{"json trailing garbage is raw", "application/json", `{"a":1}`, `{"a":1}]`, false},
		{"json two values is raw", "application/json", `{"a":1}`, `{"a":1} {"a":1}`, false},
		{"json bad escape is raw", "application/json", `{"b":"\x","a":1}`, `{"a":1,"b":"\x"}`, false},
		{"json short \\u escape is raw", "application/json", `{"b":"\u12","a":1}`, `{"a":1,"b":"\u12"}`, false},
		{"broken json is raw", "application/json", `{"a":`, `{"a":`, true},
		{"json names in two cases are raw", "application/json", `{"qty":1,"QTY":5}`, `{"QTY":5,"qty":1}`, false},
		{"json names in two spellings are raw", "application/json", `{"qty":1,"\u0071ty":5}`, `{"\u0071ty":5,"qty":1}`, false},
		{"json names one under folding are raw", "application/json", "{\"k\":1,\"\u212a\":5}", "{\"\u212a\":5,\"k\":1}", false},
		{"json big object names one under folding are raw", "application/json", bigObject(40, "\"\u212a17\":0", false), bigObject(40, "\"\u212a17\":0", true), false},
		{"json duplicate names are raw", "application/json", `{"a":{"x":1,"x":2}}`, `{"a":{"x":2,"x":1}}`, false},
		{"json big object key order", "application/json", bigObject(40, "", false), bigObject(40, "", true), true},
		{"json big object names in two cases are raw", "application/json", bigObject(40, `"K17":0`, false), bigObject(40, `"K17":0`, true), false},
		{"form key order", "application/x-www-form-urlencoded", "a=1&b=2", "b=2&a=1", true},
		{"form empty pairs", "application/x-www-form-urlencoded", "a=1&&b=2&", "b=2&a=1", true},
		{"form value order kept", "application/x-www-form-urlencoded", "a=1&a=2", "a=2&a=1", false},
		{"form escaped name is the name", "application/x-www-form-urlencoded", "a=1&%61=2", "%61=2&a=1", false},
		{"form escapes kept as written", "application/x-www-form-urlencoded", "a=x+y", "a=x%20y", false},
		{"json sent as a form", "application/x-www-form-urlencoded", `{"item":"gift+card"}`, `{"item":"gift card"}`, false},
		{"json with a query sent as a form", "application/x-www-form-urlencoded", `{"u":"/x?a=1&b=2&c=3&d=4"}`, `{"u":"/x?a=1&c=3&b=2&d=4"}`, false},
		{"json array sent as a form", "application/x-www-form-urlencoded", `["&"]`, `"]&["`, false},
		{"json after whitespace sent as a form", "application/x-www-form-urlencoded",
			"\n {\"u\":\"/x?a=1&b=2&c=3&d=4\"}", "\n {\"u\":\"/x?a=1&c=3&b=2&d=4\"}", false},
		{"form bad escape is raw", "application/x-www-form-urlencoded", "b=%zz&a=1", "a=1&b=%zz", false},
		{"other raw", "text/plain", "a b", "a  b", false},
		{"no content type raw", "", `{"a":1,"b":2}`, `{"b":2,"a":1}`, false},
	}
	for _, tt := range tests {
		ca := canonical(tt.contentType, []byte(tt.a))
		cb := canonical(tt.contentType, []byte(tt.b))
		if bytes.Equal(ca, cb) != tt.same {
			t.Errorf("%s: canonical %q and %q: same=%v, want %v", tt.name, ca, cb, !tt.same, tt.same)
		}
	}
}

// bigObject returns a JSON object of n members "k0".."k<n-1>", reversed if
// reverse, with extra as one more member after the first if not empty.
func bigObject(n int, extra string, reverse bool) string {
	var ms []string
	for i := range n {
		ms = append(ms, `"k`+strconv.Itoa(i)+`":`+strconv.Itoa(i))
	}
	if extra != "" {
		ms = slices.Insert(ms, 1, extra)
	}
	if reverse {
		slices.Reverse(ms)
	}
	return "{" + strings.Join(ms, ",") + "}"
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `[]`, `"s"`, `1e3`, `{"a":{"c":1,"b":2}}`, `{`, `{"a":1}]`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := canonical("application/json", body)
		if !json.Valid(body) {
			// Only valid JSON has a canonical form: anything else is raw.
			if !bytes.Equal(c, body) {
				t.Fatalf("invalid JSON %q was changed: %q", body, c)
			}
			return
		}
		// Canonical form is valid JSON, and canonicalising it again changes nothing.
		if !json.Valid(c) {
			t.Fatalf("canonical form of %q is not JSON: %q", body, c)
		}
		if again := canonical("application/json", c); !bytes.Equal(again, c) {
			t.Fatalf("not idempotent: %q -> %q -> %q", body, c, again)
		}
		// And it means the same (encoding/json keeps the last of duplicate
		// keys; the canonical form keeps them in order).
		var want, got any
		if json.Unmarshal(body, &want) == nil {
			if err := json.Unmarshal(c, &got); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("canonical form of %q means something else: %q", body, c)
			}
		}
	})
}

// A wide object costs the growth of a few buffers (some 30 allocations for
// 5000 members), not an allocation per member: its names are compared in
// place.
func TestCanonicalJSONWideObjectAllocs(t *testing.T) {
	body := []byte(bigObject(5000, "", true))
	if allocs := testing.AllocsPerRun(10, func() { canonical("application/json", body) }); allocs > 100 {
		t.Fatalf("%v allocations for an object of 5000 members", allocs)
	}
}

// BenchmarkCanonicalJSONWideObject compares the canonical form of a wide
// object with encoding/json's decode of it (bare): with names that are not
// ASCII too, whose folding once cost a comparison sort's every step (a 1 MiB
// object took seconds, 17 times the decode).
func BenchmarkCanonicalJSONWideObject(b *testing.B) {
	object := func(format string) []byte {
		var s strings.Builder
		s.WriteString("{")
		for i := 0; s.Len() < 64<<10; i++ {
			if i > 0 {
				s.WriteString(",")
			}
			fmt.Fprintf(&s, format, (i*7919)%1000003)
		}
		s.WriteString("}")
		return []byte(s.String())
	}
	ascii, folded := object(`"abcdefgh%d":0`), object(`"θθθθθθθθ%d":0`)
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			var v map[string]any
			if err := json.Unmarshal(folded, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name string
		body []byte
	}{{"ascii-names", ascii}, {"folded-names", folded}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var ok bool
				if buf, ok = canonicalJSON(buf[:0], c.body); !ok {
					b.Fatal("not canonicalised")
				}
			}
		})
	}
}

// Two names fold alike (appendFolded) exactly when bytes.EqualFold says
// they are equal, as encoding/json matches them.
func FuzzAppendFolded(f *testing.F) {
	for _, s := range [][2]string{
		{"qty", "QTY"}, {"k", "\u212a"}, {"s", "\u017f"}, {"ab", "a"}, {"\xff", "\xfe"}, {"\xff", "\ufffd"}, {"ß", "SS"}, {"ß", "ẞ"},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		fa, fb := appendFolded(nil, a), appendFolded(nil, b)
		if bytes.Equal(fa, fb) != bytes.EqualFold(a, b) {
			t.Fatalf("%q and %q fold to %q and %q, EqualFold %v", a, b, fa, fb, bytes.EqualFold(a, b))
		}
	})
}

// FuzzCanonicalForm checks that a form body's canonical form means what the
// body means to url.ParseQuery, and that a body it refuses stays raw.
func FuzzCanonicalForm(f *testing.F) {
	for _, s := range []string{"a=1&b=2", "b=x+y&a=%41&a=2", "a=1;b=2", "%zz=1", "&&", "a", `a&"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want, err := url.ParseQuery(string(body))
		c, ok := canonicalForm(body)
		switch {
		case err != nil && ok:
			t.Fatalf("%q does not parse, but has the canonical form %q", body, c)
		case !ok:
			return
		}
		if got, err := url.ParseQuery(string(c)); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("canonical form of %q means something else: %q", body, c)
		}
		if again := canonical("application/x-www-form-urlencoded", c); !bytes.Equal(again, c) {
			t.Fatalf("not idempotent: %q -> %q -> %q", body, c, again)
		}
	})
}

// A form body of more pairs than url.ParseQuery accepts (which a handler's
// r.ParseForm then refuses) is taken raw, at no cost per pair: a 1 MiB body
// of one-letter pairs once cost 35 to 85 times its size in memory. Up to
// the bound it is canonical, in two allocations (the pairs, the output).
func TestCanonicalFormBound(t *testing.T) {
	const ct = "application/x-www-form-urlencoded"
	form := func(pairs int) []byte {
		var b []byte
		for i := range pairs {
			if i > 0 {
				b = append(b, '&')
			}
			b = append(b, byte('z'-i%26), '=')
		}
		return b
	}
	over := form(1 << 19)
	if _, err := url.ParseQuery(string(form(maxFormPairs + 1))); err == nil {
		t.Fatalf("url.ParseQuery accepts %d pairs: maxFormPairs is not its limit", maxFormPairs+1)
	}
	for _, body := range [][]byte{over, form(maxFormPairs + 1)} {
		if c := canonical(ct, body); !bytes.Equal(c, body) {
			t.Errorf("a form of %d pairs was put in canonical form; want the raw body", bytes.Count(body, []byte("&"))+1)
		}
	}
	if n := testing.AllocsPerRun(2, func() { canonical(ct, over) }); n != 0 {
		t.Errorf("a form past the bound cost %v allocations; want 0", n)
	}
	at := form(maxFormPairs)
	if _, err := url.ParseQuery(string(at)); err != nil {
		t.Fatal(err)
	}
	if c := canonical(ct, at); bytes.Equal(c, at) {
		t.Errorf("a form of maxFormPairs pairs was left raw")
	}
	if n := testing.AllocsPerRun(2, func() { canonical(ct, at) }); n > 2 {
		t.Errorf("a form of maxFormPairs pairs cost %v allocations; want at most 2", n)
	}
}

// nested returns depth objects, each with a member "b" holding the next and a
// member "a" after it (out of order), around a string of n bytes.
func nested(depth, n int) []byte {
	var b bytes.Buffer
	for range depth {
		b.WriteString(`{"b":`)
	}
	b.WriteString(`"` + strings.Repeat("x", n) + `"`)
	for range depth {
		b.WriteString(`,"a":1}`)
	}
	return b.Bytes()
}

func TestCanonicalJSONDepth(t *testing.T) {
	body := nested(maxJSONDepth, 10)
	c, ok := canonicalJSON(nil, body)
	if !ok {
		t.Fatalf("%d levels of nesting: not canonicalised", maxJSONDepth)
	}
	var want, got any
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(c, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("canonical form means something else: %s", c)
	}
	if !bytes.HasPrefix(c, []byte(`{"a":1,"b":{"a":1,"b":`)) {
		t.Errorf("members not sorted: %.40s", c)
	}
	if _, ok := canonicalJSON(nil, nested(maxJSONDepth+1, 10)); ok {
		t.Errorf("%d levels of nesting were canonicalised; want the raw body", maxJSONDepth+1)
	}
}

// A body that nests unsorted objects as deep as allowed costs a bounded
// amount of memory: the output and one scratch buffer, not a copy per level.
func TestCanonicalJSONMemory(t *testing.T) {
	body := nested(maxJSONDepth, 1<<20)
	var ok bool
	if n := bytesAllocated(func() { _, ok = canonicalJSON(nil, body) }); !ok {
		t.Fatal("not canonicalised")
	} else if n > 4*uint64(len(body)) {
		t.Errorf("canonicalising %d bytes allocated %d bytes; want at most 4x", len(body), n)
	}
}

// A 1 MiB object of 116,000 short members, out of order, costs less memory
// than encoding/json's decode of it into a map (some 11 times its size):
// its members and folded names once cost 36 times, grown by append a
// quarter at a time.
func TestCanonicalJSONWideObjectMemory(t *testing.T) {
	limit := uint64(10)
	if raceEnabled {
		limit = 16 // the race detector allocates too: 12.7x here (36x before the members' cut)
	}
	var b bytes.Buffer
	b.WriteString("{")
	for i := 0; b.Len() < 1<<20; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"%d":0`, (i*7919)%1000003)
	}
	b.WriteString("}")
	body := b.Bytes()
	var ok bool
	if n := bytesAllocated(func() { _, ok = canonicalJSON(nil, body) }); !ok {
		t.Fatal("not canonicalised")
	} else if n > limit*uint64(len(body)) {
		t.Errorf("canonicalising %d bytes allocated %d bytes; want at most %dx", len(body), n, limit)
	}
}

// multipartBody encodes fields (name, value pairs; a name ending in ".txt"
// is sent as a file part) with a fresh random boundary, as a client does
// for every attempt.
func multipartBody(t *testing.T, fields ...string) (contentType string, body []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		var err error
		if strings.HasSuffix(fields[i], ".txt") {
			var fw io.Writer
			if fw, err = w.CreateFormFile("file", fields[i]); err == nil {
				_, err = io.WriteString(fw, fields[i+1])
			}
		} else {
			err = w.WriteField(fields[i], fields[i+1])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), b.Bytes()
}

// bytesAllocated returns the bytes f allocates.
func bytesAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A multipart body of many tiny parts, or of parts full of header lines,
// costs a bounded amount of work: past maxMultipartParts or
// maxMultipartHeaders it is fingerprinted raw.
func TestCanonicalMultipartMemory(t *testing.T) {
	const ct = "multipart/form-data; boundary=B"
	for name, part := range map[string]string{
		"empty parts":  "\r\n--B\r\n\r\n",
		"header lines": "\r\n--B\r\n" + strings.Repeat("A: 1\r\n", 250) + "\r\n",
	} {
		var hostile []byte
		for len(hostile) < 1<<20 {
			hostile = append(hostile, part...)
		}
		hostile = append(hostile, "\r\n--B--\r\n"...) // well formed: only the bound leaves it raw
		var c []byte
		n := bytesAllocated(func() { c = canonical(ct, hostile) })
		if !bytes.Equal(c, hostile) {
			t.Errorf("%s: a body past the bounds was not left raw", name)
		}
		if n > 4*uint64(len(hostile)) {
			t.Errorf("%s: %d bytes allocated %d bytes; want at most 4x", name, len(hostile), n)
		}
	}

	// At the bound, a form is still canonical.
	fields := make([]string, 0, 2*maxMultipartParts)
	for i := range maxMultipartParts {
		fields = append(fields, "f", strconv.Itoa(i))
	}
	ct2, body := multipartBody(t, fields...)
	if bytes.Equal(canonical(ct2, body), body) {
		t.Error("a form of maxMultipartParts parts was left raw")
	}
}

// FuzzCanonicalMultipart: any body under a multipart Content-Type gets a
// canonical form without panicking, the same one every time.
func FuzzCanonicalMultipart(f *testing.F) {
	f.Add("B", []byte("--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--\r\n"))
	f.Add("B", []byte("\r\n--B\r\n\r\n\r\n--B\r\n\r\n"))
	f.Add("x", []byte("--x\r\nContent-Type: text/plain\r\n\r\n--x--"))
	f.Fuzz(func(t *testing.T, boundary string, body []byte) {
		ct := mime.FormatMediaType("multipart/form-data", map[string]string{"boundary": boundary})
		if !bytes.Equal(canonical(ct, body), canonical(ct, body)) {
			t.Fatal("two canonical forms of one body")
		}
	})
}

// A Content-Disposition of many parameters is bounded too, per part and in
// all; a long UTF-8 file name is not caught by the bound.
func TestCanonicalMultipartDisposition(t *testing.T) {
	const ct = "multipart/form-data; boundary=B"
	form := func(parts int, disposition string) []byte {
		var b []byte
		for range parts {
			b = append(b, "--B\r\nContent-Disposition: "+disposition+"\r\n\r\nv\r\n"...)
		}
		return append(b, "--B--\r\n"...)
	}
	params := "form-data; name=\"f\"" + strings.Repeat("; a=b", 2000)
	longName := `form-data; name="file"; filename*=UTF-8''` + strings.Repeat("%E2%82%AC", 255)
	for _, tc := range []struct {
		name      string
		body      []byte
		canonical bool
	}{
		{"one part of 10 KB of parameters", form(1, params), false},
		{"100 parts of 1 KB each", form(100, params[:1000]), false},
		{"a 255-character UTF-8 file name", form(1, longName), true},
	} {
		c := canonical(ct, tc.body)
		if got := !bytes.Equal(c, tc.body); got != tc.canonical {
			t.Errorf("%s: canonical = %v, want %v", tc.name, got, tc.canonical)
		}
	}
}

// canonical is Body of a body of Content-Type contentType.
func canonical(contentType string, body []byte) []byte {
	c, _ := Body(nil, contentType, MediaType(contentType), body)
	return c
}

// Body appends JSON's canonical form to dst and, with room in dst and
// after a first call, allocates nothing: core's fingerprint passes a
// buffer of its own for every request.
func TestBodyAppendsToDst(t *testing.T) {
	body := []byte(`{"qty":2, "item":{"z":1,"a":[1,2]}}`)
	dst := append(make([]byte, 0, 256), "prefix:"...)
	c, ok := Body(dst, "application/json", "application/json", body)
	if want := `prefix:{"item":{"a":[1,2],"z":1},"qty":2}`; !ok || string(c) != want {
		t.Fatalf("Body = %q, %v; want %q", c, ok, want)
	}
	if raceEnabled {
		return
	}
	if allocs := testing.AllocsPerRun(100, func() { Body(dst[:0], "application/json", "application/json", body) }); allocs != 0 {
		t.Errorf("Body allocated %.0f times per call, want 0", allocs)
	}
}

// Two multipart bodies whose parts differ in a header line that the form's
// parser hands the handler (multipart.FileHeader.Header: a second line of
// Content-Type, a header of its own) are two requests; header names in
// another order or case, and another boundary, are not.
func TestCanonicalMultipartHeaders(t *testing.T) {
	form := func(boundary string, headers ...string) (string, []byte) {
		part := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\n"
		for _, h := range headers {
			part += h + "\r\n"
		}
		return "multipart/form-data; boundary=" + boundary, []byte(part + "\r\nv\r\n--" + boundary + "--\r\n")
	}
	base := canonical(form("B", "Content-Type: text/plain"))
	for _, tc := range []struct {
		name    string
		headers []string
		same    bool
	}{
		{"another boundary", []string{"Content-Type: text/plain"}, true},
		{"a second Content-Type line", []string{"Content-Type: text/plain", "Content-Type: image/png"}, false},
		{"a header of its own", []string{"Content-Type: text/plain", "Content-Id: <x>"}, false},
		// The content's length is fingerprinted: a client that sends it
		// (OkHttp) fingerprints as before Content-Id and the like joined.
		{"a Content-Length", []string{"Content-Type: text/plain", "Content-Length: 1"}, true},
		{"a Content-Transfer-Encoding line that holds the other header", []string{"Content-Type: text/plain",
			"Content-Transfer-Encoding: 8bit", "Content-Transfer-Encoding: Content-Id:<x>"}, false},
	} {
		ct, body := form("C", tc.headers...)
		if got := bytes.Equal(canonical(ct, body), base); got != tc.same {
			t.Errorf("%s: same canonical form = %v, want %v", tc.name, got, tc.same)
		}
	}
	// Header names in another order or case are the same part to the parser.
	a, b := canonical(form("B", "Content-Id: <x>", "Content-Type: text/plain")), canonical(form("B", "content-type: text/plain", "CONTENT-ID: <x>"))
	if !bytes.Equal(a, b) {
		t.Error("header names in another order or case: two canonical forms")
	}
	// Other headers and extra lines are told apart from one another.
	c, d := canonical(form("B", "X-A: 1", "X-A: 2")), canonical(form("B", "X-A: 1", "X-B: 2"))
	if bytes.Equal(c, d) {
		t.Error("X-A twice and X-A then X-B: one canonical form")
	}
}
