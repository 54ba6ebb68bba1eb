package admin

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// WriteKey writes k as a table of fields for a reader, times in UTC with
// how long ago (or ahead) they are; the stored headers and body, if k has
// them, last. Non-printable characters of stored values (escape sequences,
// bidirectional overrides) are written escaped as in a Go string literal
// (\x1b, \u202e), so that none reaches the terminal; the body keeps its
// newlines and tabs. The exact bytes are in k's JSON (idemctl -json).
func WriteKey(w io.Writer, k Key) error {
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s\t%s\n", name, escape(value, ""))
		}
	}
	row("id", k.ID)
	row("status", k.Status)
	row("scope", k.Scope)
	row("key", k.Key)
	if k.Code != 0 {
		row("code", fmt.Sprint(k.Code))
	}
	row("created", when(k.Created, now))
	row("completed", when(k.Completed, now))
	row("locked at", when(k.LockedAt, now))
	row("expires", when(k.Expires, now))
	sealed := k.SealedBy != "" && k.Key == "" && k.Error == "" // and not opened
	if sealed {
		row("sealed", "by key "+k.SealedBy+": its keys open the scope, key, code, headers and body")
	} else if k.SealedBy != "" {
		row("sealed", "by key "+k.SealedBy)
	}
	if k.Status == StatusCompleted && !sealed {
		size := fmt.Sprintf("%d bytes", k.Size)
		if k.BodyOmitted {
			size += " (too large: not stored)"
		}
		row("size", size)
	}
	row("error", k.Error)
	names := make([]string, 0, len(k.Header))
	for name := range k.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		row("header", name+": "+strings.Join(k.Header[name], ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if k.Body == "" {
		return nil
	}
	enc, body := "", escape(k.Body, "\n\t")
	switch {
	case k.BodyBase64:
		enc = " (base64)"
	case body != k.Body:
		enc = " (control characters escaped)"
	}
	_, err := fmt.Fprintf(w, "\nbody%s:\n%s\n", enc, body)
	return err
}

// escape returns s with every rune that is not printable (strconv.IsPrint)
// nor in keep, and every invalid UTF-8 byte, escaped as in a Go string
// literal.
func escape(s, keep string) string {
	clean := func(r rune, size int) bool {
		return (strconv.IsPrint(r) && (r != utf8.RuneError || size > 1)) || strings.ContainsRune(keep, r)
	}
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !clean(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case clean(r, size):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// WriteKeys writes keys as a table, one line each: the in-flight list. IDs
// and statuses are escaped as in WriteKey: a store's key names are not
// trusted to be printable.
func WriteKeys(w io.Writer, keys []Key) error {
	if len(keys) == 0 {
		_, err := fmt.Fprintln(w, "no keys in flight")
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tLOCKED AT\tAGE\tEXPIRES")
	for _, k := range keys {
		locked, age := "unknown", "unknown"
		if !k.LockedAt.IsZero() {
			locked = k.LockedAt.UTC().Format(time.RFC3339)
			age = roundSeconds(time.Duration(k.AgeSeconds * float64(time.Second))).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", escape(k.ID, ""), escape(k.Status, ""), locked, age, when(k.Expires, now))
	}
	return tw.Flush()
}

// when formats t in UTC with its distance from now; "" if t is zero.
func when(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := roundSeconds(t.Sub(now))
	var rel string
	switch {
	case d > 0:
		rel = "in " + d.String()
	case d == 0:
		rel = "now"
	default:
		rel = (-d).String() + " ago"
	}
	return t.UTC().Format(time.RFC3339) + " (" + rel + ")"
}

func roundSeconds(d time.Duration) time.Duration { return d.Round(time.Second) }
