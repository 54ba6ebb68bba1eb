// Command readme is the README's "Use" block as a program: release-check
// builds it in a new module after the README's first go get line alone.
package main

import (
	"log"
	"net/http"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

func main() {
	redisClient, err := redislock.NewClient("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	store, err := redislock.New(redisClient, nil)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
