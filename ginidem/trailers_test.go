package ginidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/ginidem"
)

// Trailers a handler sets after the body, declared by its Trailer header
// or with http.TrailerPrefix (connect-go's gRPC protocol sends Grpc-Status
// so), reach the client on the first response and on its replay, also when
// the flight is Buffered (its response held until the commit).
func TestTrailersSetAfterBody(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	for _, tx := range []bool{false, true} {
		var store core.Store = core.NewMemoryStore(0)
		if tx {
			store = idemtest.NewTxStore(t)
		}
		eng, err := core.New(core.Config{Store: store, Observer: func(core.Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		r := gin.New()
		r.Use(ginidem.New(eng))
		r.POST("/t", func(c *gin.Context) {
			runs++
			c.Header("Trailer", "X-Checksum")
			c.Status(201)
			c.Writer.Write([]byte("ok")) //nolint:errcheck // a test's recorder
			c.Writer.Header().Set("X-Checksum", "c1")
			c.Writer.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		})
		srv := httptest.NewServer(r)
		for i := range 2 {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/t", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "k")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 201 || string(b) != "ok" || resp.Trailer.Get("X-Checksum") != "c1" || resp.Trailer.Get("Grpc-Status") != "0" {
				t.Errorf("Buffered %v, #%d: %d %q, trailers %v; want 201 ok with X-Checksum c1 and Grpc-Status 0", tx, i+1, resp.StatusCode, b, resp.Trailer)
			}
			if got := resp.Header.Get(core.HeaderReplay); got != map[bool]string{true: "true"}[i == 1] {
				t.Errorf("Buffered %v, #%d: %s %q", tx, i+1, core.HeaderReplay, got)
			}
		}
		srv.Close()
		if runs != 1 {
			t.Errorf("Buffered %v: %d runs, want 1", tx, runs)
		}
	}
}
