package ginidem_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/ginidem"
)

// The handler reads the key it runs under from the request's context.
func TestInfoFromContext(t *testing.T) {
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	var got []string
	r.POST("/orders", func(c *gin.Context) {
		info, ok := core.InfoFromContext(c.Request.Context())
		if ok {
			got = append(got, info.Key)
		} else {
			got = append(got, "-")
		}
		c.Status(http.StatusCreated)
	})
	post(r, "/orders", "info-1")
	post(r, "/orders", "")
	if len(got) != 2 || got[0] != "info-1" || got[1] != "-" {
		t.Fatalf("handlers saw keys %q, want [info-1 -]", got)
	}
}
