package echov5idem

import (
	"io"
	"strings"
	"testing"
)

// Reading a body through limitedBody allocates nothing: it wraps the body
// of every keyed request.
func TestLimitedBodyReadAllocs(t *testing.T) {
	src := strings.NewReader(strings.Repeat("x", 100))
	b := &limitedBody{ReadCloser: io.NopCloser(src)}
	buf := make([]byte, 64)
	n := testing.AllocsPerRun(10, func() {
		src.Seek(0, io.SeekStart) //nolint:errcheck // a strings.Reader's Seek to 0 cannot fail
		for {
			if _, err := b.Read(buf); err != nil {
				break
			}
		}
	})
	if n != 0 || b.err != nil {
		t.Errorf("%v allocations per body, err %v; want none", n, b.err)
	}
}
