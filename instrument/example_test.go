package instrument_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

// Each store call of a request is reported: the first request with a key
// takes the lock (held +1) and stores its response (held -1); its retry is
// a replay, one Acquire that takes no lock.
func ExampleStore() {
	var (
		mu    sync.Mutex
		calls []string
	)
	store := instrument.Store(core.NewMemoryStore(0), func(_ context.Context, op instrument.Op, _ time.Duration, err error, held int) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, fmt.Sprintf("%s held=%+d failed=%t", op, held, instrument.Failed(err)))
	})
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		panic(err)
	}
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", "9b2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(strings.Join(calls, "\n"))
	// Output:
	// acquire held=+1 failed=false
	// complete held=-1 failed=false
	// acquire held=+0 failed=false
}
