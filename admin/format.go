package admin

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteKey writes k as a table of fields for a reader, times in UTC with
// how long ago (or ahead) they are; the stored headers and body, if k has
// them, last.
func WriteKey(w io.Writer, k Key) error {
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s\t%s\n", name, value)
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
	if k.Status == StatusCompleted {
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
	enc := ""
	if k.BodyBase64 {
		enc = " (base64)"
	}
	_, err := fmt.Fprintf(w, "\nbody%s:\n%s\n", enc, k.Body)
	return err
}

// WriteKeys writes keys as a table, one line each: the in-flight list.
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Status, locked, age, when(k.Expires, now))
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
