package ginidem_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/ginidem"
)

func Example() {
	eng, err := core.New(core.Config{}) // the memory store; redislock.New(...) across instances
	if err != nil {
		log.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery()) // then the authentication middleware
	// idem on the routes it protects only (README, "Use"): under r.Use, a
	// login route's 401 would be stored under the client's key and replayed.
	g := r.Group("/orders", ginidem.New(eng))
	orders := 0
	g.POST("", func(c *gin.Context) {
		orders++
		c.JSON(http.StatusCreated, gin.H{"id": orders})
	})

	for range 2 { // a client retries with the same key
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", "8e5d1c0a-order-1")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Printf("%d %s X-Idempotency-Replay=%q\n", rec.Code, rec.Body, rec.Header().Get("X-Idempotency-Replay"))
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 {"id":1} X-Idempotency-Replay=""
	// 201 {"id":1} X-Idempotency-Replay="true"
	// orders created: 1
}
