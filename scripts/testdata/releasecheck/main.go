// Command releasecheck is the dependent that scripts/release-check builds
// outside the repository: it uses seven idem modules as a user's go get
// fetched them, and sends one key twice through a Gin route.
package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v3"
	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/echov5idem"
	"github.com/idem-go/idem/fiberv3idem"
	"github.com/idem-go/idem/ginidem"
	"github.com/idem-go/idem/grpcidem"
	"github.com/idem-go/idem/idemprom"
	"github.com/idem-go/idem/pgstore"
)

var _ core.Store = (*pgstore.Store)(nil)

func main() {
	if err := run(); err != nil {
		fmt.Println("release-check: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("release-check: PASS: POST /orders twice with one key through ginidem: 201, then 201 replayed; the handler ran once")
}

func run() error {
	metrics, err := idemprom.New(prometheus.NewRegistry(), nil)
	if err != nil {
		return err
	}
	eng, err := core.New(core.Config{Observer: metrics.Observe})
	if err != nil {
		return err
	}
	grpc.NewServer(grpc.ChainUnaryInterceptor(grpcidem.UnaryServerInterceptor(eng))).Stop()
	echo.New().Use(echov5idem.New(eng))
	fiber.New().Post("/orders", fiberv3idem.New(fiberv3idem.Config{Engine: eng}))

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginidem.New(eng))
	runs := 0
	r.POST("/orders", func(c *gin.Context) {
		runs++
		c.JSON(http.StatusCreated, gin.H{"id": runs})
	})
	for i, want := range []string{"", "true"} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "release-check-1")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if got := w.Header().Get(core.HeaderReplay); w.Code != http.StatusCreated || got != want || w.Body.String() != `{"id":1}` {
			return fmt.Errorf("request %d: %d %s, %s %q; want 201 {\"id\":1}, %q", i+1, w.Code, w.Body, core.HeaderReplay, got, want)
		}
	}
	if runs != 1 {
		return fmt.Errorf("the handler ran %d times, want 1", runs)
	}
	return nil
}
