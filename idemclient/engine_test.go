package idemclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// orderServer serves POST /orders through eng's middleware; the handler
// counts its runs and answers 201 {"id":N}, or what fail says for a run.
func orderServer(t *testing.T, eng *core.Engine, runs *atomic.Int32, fail func(run int32, w http.ResponseWriter) bool) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) //nolint:errcheck
		n := runs.Add(1)
		if fail != nil && fail(n, w) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, n)
	})))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // a test handler panics on purpose
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/orders"
}

// loseFirst sends its first request but loses the response on the way
// back, as a timeout or a dropped connection would: the server handled it,
// the client sees an error.
type loseFirst struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    int
	lost string // the lost response's body
}

func (l *loseFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n++; l.n > 1 || err != nil {
		return resp, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	l.lost = string(b)
	return nil, errors.New("read: connection reset by peer")
}

func TestEngine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		lose     bool                                        // lose the first response
		fail     func(run int32, w http.ResponseWriter) bool // the handler's first run fails
		runs     int32
		replayed bool
	}{
		{"response lost: the retry gets the replay", true, nil, 1, true},
		{"500 not stored: the retry runs the handler again", false, func(run int32, w http.ResponseWriter) bool {
			if run == 1 {
				w.WriteHeader(http.StatusInternalServerError)
			}
			return run == 1
		}, 2, false},
		{"panic: the connection drops, the retry runs the handler again", false, func(run int32, w http.ResponseWriter) bool {
			if run == 1 {
				panic("handler bug")
			}
			return false
		}, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eng, err := core.New(core.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			url := orderServer(t, eng, &runs, tt.fail)
			lf := &loseFirst{base: &http.Transport{DisableKeepAlives: true}, n: 1}
			if tt.lose {
				lf.n = 0
			}
			tr := &Transport{Base: lf}
			useFakeTime(tr)
			resp, err := tr.RoundTrip(post(t, url, `{"item":"book","qty":2}`))
			if err != nil {
				t.Fatal(err)
			}
			body := readBody(t, resp)
			if resp.StatusCode != 201 || Attempts(resp) != 2 || Replayed(resp) != tt.replayed {
				t.Fatalf("%d %s after %d attempts, replayed %v; want 201 after 2, replayed %v", resp.StatusCode, body, Attempts(resp), Replayed(resp), tt.replayed)
			}
			if runs.Load() != tt.runs {
				t.Fatalf("the handler ran %d times, want %d", runs.Load(), tt.runs)
			}
			if tt.lose && body != lf.lost {
				t.Fatalf("replayed %q, the lost response was %q", body, lf.lost)
			}
		})
	}
}

// detachFirst sends its first request in the background and returns an
// error once the handler has started, as a client timeout would.
type detachFirst struct {
	base    http.RoundTripper
	started <-chan struct{}
	first   chan string // the first response's body, when it comes
	calls   atomic.Int32
}

func (d *detachFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if d.calls.Add(1) > 1 {
		return d.base.RoundTrip(r)
	}
	go func() {
		resp, err := d.base.RoundTrip(r)
		if err != nil {
			d.first <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d.first <- string(b)
	}()
	<-d.started
	return nil, context.DeadlineExceeded
}

// A retry that comes while the first request runs gets 409 with
// Retry-After; the Transport waits that long and gets the replay.
func TestEngineInFlight(t *testing.T) {
	t.Parallel()
	stored := make(chan struct{})
	eng, err := core.New(core.Config{Observer: func(e core.Event) {
		if e.Outcome == core.OutcomeStored {
			close(stored)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	url := orderServer(t, eng, &runs, func(run int32, _ http.ResponseWriter) bool {
		close(started) // a second run would panic here
		<-release
		return false
	})
	base := &detachFirst{base: &http.Transport{DisableKeepAlives: true}, started: started, first: make(chan string, 1)}
	tr := &Transport{Base: base}
	var waits []time.Duration
	tr.sleep = func(_ context.Context, d time.Duration) error {
		waits = append(waits, d) // the Transport's goroutine only
		if len(waits) == 2 {     // after the 409
			close(release)
			<-stored
		}
		return nil
	}
	resp, err := tr.RoundTrip(post(t, url, `{"item":"pen","qty":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp)
	if first := <-base.first; resp.StatusCode != 201 || !Replayed(resp) || body != first {
		t.Fatalf("%d %q replayed %v; want 201, the first response %q, replayed", resp.StatusCode, body, Replayed(resp), first)
	}
	if runs.Load() != 1 || Attempts(resp) != 3 {
		t.Fatalf("handler ran %d times, %d attempts; want 1 and 3 (lost, 409, replay)", runs.Load(), Attempts(resp))
	}
	if len(waits) != 2 || waits[1] != time.Second {
		t.Fatalf("waits %v, want the backoff, then the 409's Retry-After (%v)", waits, time.Second)
	}
}

// Many duplicates through one Transport with one key: the handler runs
// once; every other gets 409, waits, and gets the replay.
func TestEngineConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const n = 50
	stored := make(chan struct{})
	var conflicts, replays atomic.Int32
	eng, err := core.New(core.Config{Observer: func(e core.Event) {
		switch e.Outcome {
		case core.OutcomeStored:
			close(stored)
		case core.OutcomeConflict:
			conflicts.Add(1)
		case core.OutcomeReplay:
			replays.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var runs atomic.Int32
	url := orderServer(t, eng, &runs, func(int32, http.ResponseWriter) bool { <-release; return false })
	base := &http.Transport{MaxIdleConnsPerHost: n}
	t.Cleanup(base.CloseIdleConnections)
	tr := &Transport{Base: base}
	var sleeping, badWaits atomic.Int32
	tr.sleep = func(_ context.Context, d time.Duration) error {
		if d != time.Second { // not the 409's Retry-After
			badWaits.Add(1)
		}
		if sleeping.Add(1) == n-1 { // every duplicate got its 409
			close(release)
		}
		<-stored
		return nil
	}

	type result struct {
		status, attempts int
		replayed         bool
		body             string
		err              error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, url, nil)
			req.Header.Set("Idempotency-Key", "4f2b0a2e-6a39-4d8e-9f55-0c7f2a1b3c4d")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				results[i].err = err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results[i] = result{resp.StatusCode, Attempts(resp), Replayed(resp), string(b), nil}
		}()
	}
	wg.Wait()
	firsts := 0
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("request %d: %v", i, r.err)
		case r.status != 201 || r.body != `{"id":1}`:
			t.Errorf("request %d: %d %q, want 201 {\"id\":1}", i, r.status, r.body)
		case !r.replayed && r.attempts == 1:
			firsts++
		case !r.replayed || r.attempts != 2:
			t.Errorf("request %d: replayed %v after %d attempts, want the replay after 2", i, r.replayed, r.attempts)
		}
	}
	if badWaits.Load() != 0 {
		t.Errorf("%d waits other than the 409's Retry-After (%v)", badWaits.Load(), time.Second)
	}
	if runs.Load() != 1 || firsts != 1 || conflicts.Load() != n-1 || replays.Load() != n-1 {
		t.Fatalf("handler ran %d times, %d first responses, %d conflicts, %d replays; want 1, 1, %d, %d",
			runs.Load(), firsts, conflicts.Load(), replays.Load(), n-1, n-1)
	}
}

// An application's own 409 with Retry-After is stored: the retry that the
// Retry-After asks for gets its replay, which is final, and is returned
// rather than sent again until MaxAttempts.
func TestEngineReplayNotRetried(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	url := orderServer(t, eng, &runs, func(_ int32, w http.ResponseWriter) bool {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusConflict) // the order is being edited elsewhere
		return true
	})
	tr := &Transport{Base: &http.Transport{DisableKeepAlives: true}}
	useFakeTime(tr)
	resp, err := tr.RoundTrip(post(t, url, `{"item":"book","qty":2}`))
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	if resp.StatusCode != http.StatusConflict || !Replayed(resp) || Attempts(resp) != 2 || runs.Load() != 1 {
		t.Fatalf("%d replayed %v after %d attempts, %d runs; want the 409's replay after 2 attempts, 1 run",
			resp.StatusCode, Replayed(resp), Attempts(resp), runs.Load())
	}
}
