// Command readme is the README's "Use" block as a program: release-check
// builds it in a new module after the README's first go get line alone, and
// checks that main holds the block as the README has it.
package main

import (
	"log"
	"net/http"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"

	"example.com/readme/auth"
)

func createOrder(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusCreated)
}

func main() {
	redisClient, err := redislock.NewClient("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	store, err := redislock.New(redisClient, nil)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{
		Store: store, // default: in memory, one instance
		// The user that the authentication middleware put in the context.
		Scope: func(r *core.Request) string { return auth.UserFrom(r.Context) },
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", auth.Middleware(eng.Middleware(http.HandlerFunc(createOrder))))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
