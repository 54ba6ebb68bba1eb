package idemclient_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemclient"
)

// lossy loses the first response on its way back, as a timeout would.
type lossy struct{ lost bool }

func (l *lossy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && !l.lost {
		l.lost = true
		resp.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	return resp, err
}

// The first response is lost; the client sends the request again with the
// same key and gets the stored response back, so the order is created once.
func Example() {
	eng, _ := core.New(core.Config{})
	orders := 0
	srv := httptest.NewServer(eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, orders)
	})))
	defer srv.Close()

	client := &http.Client{Transport: &idemclient.Transport{
		Base:      &lossy{},              // default: http.DefaultTransport
		BaseDelay: 10 * time.Millisecond, // default: 100 ms, 200 ms, 400 ms
	}}
	resp, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("attempts:", idemclient.Attempts(resp), "replayed:", idemclient.Replayed(resp))
	fmt.Println("key sent:", resp.Request.Header.Get("Idempotency-Key") != "")
	fmt.Println("orders created:", orders)
	// Output:
	// 201 {"id":1}
	// attempts: 2 replayed: true
	// key sent: true
	// orders created: 1
}
