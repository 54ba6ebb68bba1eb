package core_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemkey"
)

// The first request with a key runs the handler; a retry with the same key
// gets the stored response back, marked as a replay; the same key with a
// different body is refused.
func Example() {
	// The app's authentication: the user of a request's token.
	type userKey struct{}
	tokens := map[string]string{"Bearer alice-token": "alice"}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, ok := tokens[r.Header.Get("Authorization")]
			if !ok {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
		})
	}
	eng, err := core.New(core.Config{
		// Keys of different users never meet. The user is the
		// authenticated one, never a header the client chooses.
		Scope: func(r *core.Request) string { user, _ := r.Context.Value(userKey{}).(string); return user },
	})
	if err != nil {
		panic(err)
	}
	orders := 0
	mux := http.NewServeMux()
	mux.Handle("POST /orders", authenticate(eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, orders)
	}))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	send := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Idempotency-Key", "9b2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("Content-Type") == "application/problem+json" {
			fmt.Println(resp.StatusCode, "application/problem+json")
			return
		}
		fmt.Printf("%d replay=%q %s\n", resp.StatusCode, resp.Header.Get(core.HeaderReplay), b)
	}
	send(`{"item":"book","qty":2}`)
	send(`{"qty": 2, "item": "book"}`) // the same JSON, written differently
	send(`{"item":"book","qty":3}`)
	fmt.Println("orders created:", orders)
	// Output:
	// 201 replay="" {"id":1}
	// 201 replay="true" {"id":1}
	// 422 application/problem+json
	// orders created: 1
}

// Validators restrict the keys a route accepts; a bad key gets 400.
func ExampleConfig_validateKey() {
	eng, _ := core.New(core.Config{ValidateKey: idemkey.UUIDv4, Required: true})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, key := range []string{"", "not-a-uuid", "9b2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d"} {
		r := httptest.NewRequest(http.MethodPost, "/payments", nil)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Content-Type"))
	}
	// Output:
	// 400 application/problem+json
	// 400 application/problem+json
	// 200
}
