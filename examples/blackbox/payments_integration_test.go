//go:build integration

package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// Issue 24's "Done when": two examples/payments instances and one fake
// provider; a client sends paymentsCount payments, paymentsClients at a
// time, a third of them with fail_after ("charge" or "record": the
// instance exits right after that step ran), restarts an instance when it
// exits, and retries each key on the other instance until it gets a 201. The provider must show exactly
// one charge per payment, sent with the key core.DerivedKey gives (what a
// re-run of the handler would send), and GET /payments exactly one payment
// per key, with that charge. On Redis, on PostgreSQL in the transactional
// mode, and on PostgreSQL in the lease mode.

const (
	paymentsCount   = 100
	paymentsClients = 10
	paymentsUser    = "payer"
	// paymentsFor bounds a run: the lease modes wait out the initial lease
	// of each crashed key (10 s), ten keys at a time.
	paymentsFor = 3 * time.Minute
)

func TestPaymentsCrashes(t *testing.T) {
	server, provider := build(t, "payments"), build(t, "payments/provider")
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) []string
	}{
		{"redis", func(t *testing.T) []string { return []string{"REDIS_URL=" + startRedis(t).url(), "DATABASE_URL="} }},
		{"postgres", func(t *testing.T) []string {
			return []string{"REDIS_URL=", "DATABASE_URL=" + postgresSchema(t), "IDEM_TX="}
		}},
		{"postgres-lease", func(t *testing.T) []string {
			return []string{"REDIS_URL=", "DATABASE_URL=" + postgresSchema(t), "IDEM_TX=0"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runPayments(t, server, provider, tc.env(t))
		})
	}
}

// paymentsRun is the processes of one run and what the client saw.
type paymentsRun struct {
	t        *testing.T
	provider string // its URL
	procs    [2]*proc
	client   *http.Client
	crashes  atomic.Int64
	failed   chan string // an instance that exited otherwise than by fail_after
}

func runPayments(t *testing.T, serverBin, providerBin string, env []string) {
	ctx, cancel := context.WithTimeout(context.Background(), paymentsFor)
	defer cancel()
	r := &paymentsRun{t: t, client: &http.Client{Timeout: 30 * time.Second}, failed: make(chan string, 2)}
	t.Cleanup(r.client.CloseIdleConnections)
	prov := &proc{bin: providerBin, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), logs: &lockedBuffer{}}
	r.provider = "http://" + prov.addr
	r.startProc(prov)
	for i := range r.procs {
		r.procs[i] = &proc{bin: serverBin, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			env: append([]string{"PROVIDER_URL=" + r.provider}, env...), logs: &lockedBuffer{}}
		r.startProc(r.procs[i])
	}
	stop := make(chan struct{})
	var supervisors sync.WaitGroup
	for i := range r.procs {
		supervisors.Add(1)
		go func() { defer supervisors.Done(); r.supervise(i, stop) }()
	}
	defer supervisors.Wait()
	defer close(stop)

	keys := make([]string, paymentsCount)
	failAfter := map[string]string{}
	for i := range keys {
		keys[i] = fmt.Sprintf("pay-%s-%d-%03d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano(), i)
		switch i % 6 {
		case 0:
			failAfter[keys[i]] = "charge"
		case 3:
			failAfter[keys[i]] = "record"
		}
	}
	created := make(map[string]map[string]any, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range paymentsClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				body, err := r.pay(ctx, i, keys[i], failAfter[keys[i]])
				mu.Lock()
				created[keys[i]] = body
				mu.Unlock()
				if err != nil {
					t.Errorf("key %s (fail_after %q): %v", keys[i], failAfter[keys[i]], err)
				}
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case msg := <-r.failed:
		t.Fatal(msg)
	default:
	}
	if t.Failed() {
		return
	}
	// One crash per payment with fail_after, but for those that another's
	// crash killed after their step ran and before their own crash: their
	// retry is served the step's checkpoint, and does not crash.
	if got := r.crashes.Load(); got > int64(len(failAfter)) || got < int64(len(failAfter))*3/4 {
		t.Errorf("%d crashes, want at most one per payment with fail_after (%d), and most of them", got, len(failAfter))
	}
	r.check(t, keys, created)
}

// startProc starts p, stopped at the test's end, and waits until it listens.
func (r *paymentsRun) startProc(p *proc) {
	r.t.Helper()
	if err := p.start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		p.kill()
		if r.t.Failed() {
			l := p.logs.String()
			r.t.Logf("%s %s log (last 4 KiB):\n%s", p.bin, p.addr, l[max(0, len(l)-4096):])
		}
	})
	if err := p.listening(30 * time.Second); err != nil {
		r.t.Fatalf("%v:\n%s", err, p.logs.String())
	}
}

// supervise restarts instance i each time it exits with status 3 (a
// fail_after crash), until stop; any other exit is a failure.
func (r *paymentsRun) supervise(i int, stop <-chan struct{}) {
	p := r.procs[i]
	for {
		p.mu.Lock()
		cmd, done := p.cmd, p.done
		p.mu.Unlock()
		if cmd == nil {
			return // killed by the cleanup
		}
		select {
		case <-stop:
			return
		case <-done:
		}
		p.mu.Lock()
		killed := p.cmd == nil
		p.mu.Unlock()
		if killed {
			return
		}
		if code := cmd.ProcessState.ExitCode(); code != 3 {
			r.failed <- fmt.Sprintf("instance %d exited with status %d, not by fail_after", i, code)
			return
		}
		r.crashes.Add(1)
		if err := p.restart(r.t, 30*time.Second); err != nil {
			r.failed <- fmt.Sprintf("restarting instance %d: %v", i, err)
			return
		}
	}
}

// pay sends payment i until it gets a 201, starting on instance i%2 and
// switching instance after any other answer, and returns the 201's body.
func (r *paymentsRun) pay(ctx context.Context, i int, key, failAfter string) (map[string]any, error) {
	body := fmt.Sprintf(`{"amount": %d, "account": "acct-%d", "fail_after": %q}`, 100+i, i%5, failAfter)
	inst := i % 2
	var last string
	for attempt := 0; ; attempt++ {
		status, resp, err := r.send(ctx, inst, key, body)
		if status == http.StatusCreated {
			var b map[string]any
			if err := json.Unmarshal(resp, &b); err != nil {
				return nil, fmt.Errorf("201 %s: %v", resp, err)
			}
			return b, nil
		}
		last = fmt.Sprintf("%d %s %v", status, resp, err)
		inst = 1 - inst
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no 201 after %d attempts; the last: %s", attempt+1, last)
		case <-time.After(min(50*time.Millisecond<<min(attempt, 4), 500*time.Millisecond)):
		}
	}
}

// send posts one attempt to instance inst.
func (r *paymentsRun) send(ctx context.Context, inst int, key, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.procs[inst].addr+"/payments", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-ID", paymentsUser)
	req.Header.Set("Idempotency-Key", key)
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// check compares what the provider charged and what the instances recorded
// with the 201s the client got.
func (r *paymentsRun) check(t *testing.T, keys []string, created map[string]map[string]any) {
	t.Helper()
	var charges struct {
		Count   int `json:"count"`
		Charges []struct {
			ID             string `json:"id"`
			Payment        string `json:"payment"`
			IdempotencyKey string `json:"idempotency_key"`
		} `json:"charges"`
	}
	getJSON(t, r.client, r.provider+"/charges", &charges)
	var payments struct {
		Count    int `json:"count"`
		Payments []struct {
			Key      string `json:"key"`
			ID       string `json:"id"`
			ChargeID string `json:"charge_id"`
		} `json:"payments"`
	}
	getJSON(t, r.client, "http://"+r.procs[0].addr+"/payments", &payments)
	if charges.Count != len(charges.Charges) || payments.Count != len(payments.Payments) {
		t.Fatalf("counts %d and %d for %d charges and %d payments", charges.Count, payments.Count, len(charges.Charges), len(payments.Payments))
	}
	t.Logf("%d payments, %d crashes: the provider has %d charges, the instances %d payments",
		len(keys), r.crashes.Load(), charges.Count, payments.Count)
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	label := "POST " + strings.TrimPrefix(r.provider, "http://") + "/charges"
	for _, key := range keys {
		var chargeIDs, chargeKeys, paymentIDs []string
		for _, c := range charges.Charges {
			if c.Payment == key {
				chargeIDs, chargeKeys = append(chargeIDs, c.ID), append(chargeKeys, c.IdempotencyKey)
			}
		}
		for _, p := range payments.Payments {
			if p.Key == key {
				paymentIDs = append(paymentIDs, p.ID+" "+p.ChargeID)
			}
		}
		// The key a run of the handler under (user, key) sends the provider.
		derived, _, err := core.Do(context.Background(), eng, paymentsUser, key, func(ctx context.Context) (string, error) {
			k, _ := core.DerivedKey(ctx, label)
			return k, nil
		})
		switch {
		case err != nil:
			t.Fatal(err)
		case len(chargeIDs) != 1:
			t.Errorf("key %s: %d charges %v, want 1", key, len(chargeIDs), chargeKeys)
		case chargeKeys[0] != derived:
			t.Errorf("key %s: charged with Idempotency-Key %q, want the derived %q", key, chargeKeys[0], derived)
		case len(paymentIDs) != 1:
			t.Errorf("key %s: %d payments %v, want 1", key, len(paymentIDs), paymentIDs)
		case paymentIDs[0] != fmt.Sprint(created[key]["id"], " ", chargeIDs[0]) || created[key]["charge_id"] != chargeIDs[0]:
			t.Errorf("key %s: payment %q, charge %s, 201 %v: want one payment of that charge", key, paymentIDs[0], chargeIDs[0], created[key])
		}
	}
}

func getJSON(t *testing.T, c *http.Client, url string, v any) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

// threadStates returns the states of the threads of process pid, from
// /proc/pid/task/*/stat ("T" stopped by a signal), and whether all are
// stopped. Without /proc (not Linux), it reports them stopped.
func threadStates(t *testing.T, pid int) (string, bool) {
	t.Helper()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		return "", true
	}
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		t.Fatalf("threads of process %d: %v (none found)", pid, err)
	}
	var states []string
	stopped := true
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			t.Fatalf("threads of process %d: %v", pid, err)
		}
		// "pid (comm) S ...": the state follows the last ')'.
		_, rest, _ := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
		state, _, _ := strings.Cut(rest, " ")
		states = append(states, state)
		stopped = stopped && state == "T"
	}
	return strings.Join(states, " "), stopped
}

// startPaymentsOnRedis starts a provider and one examples/payments instance
// (r.procs[0]) on a Redis of the test's own, with env added to the
// instance's environment; r's client times out after timeout.
func startPaymentsOnRedis(t *testing.T, timeout time.Duration, env ...string) (*paymentsRun, *redisProc, *proc) {
	server, providerBin := build(t, "payments"), build(t, "payments/provider")
	rdb := startRedis(t)
	r := &paymentsRun{t: t, client: &http.Client{Timeout: timeout}}
	t.Cleanup(r.client.CloseIdleConnections)
	prov := &proc{bin: providerBin, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), logs: &lockedBuffer{}}
	r.provider = "http://" + prov.addr
	r.startProc(prov)
	r.procs[0] = &proc{bin: server, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), logs: &lockedBuffer{},
		env: append([]string{"PROVIDER_URL=" + r.provider, "REDIS_URL=" + rdb.url(), "DATABASE_URL="}, env...)}
	r.startProc(r.procs[0])
	return r, rdb, prov
}

// paymentsRedisDownWithin bounds the answers of examples/payments on Redis
// while Redis is down: the Engine's store call (Config.StoreTimeout, 1 s)
// and the payments' own Redis calls (1 s), with room for a slow machine.
const paymentsRedisDownWithin = 5 * time.Second

// With Redis down, examples/payments answers within a few seconds, as the
// order examples do: POST /payments runs unprotected (fail-open), and the
// payment's record fails (500); GET /payments fails. Before, both waited
// 20 s for the Redis client (redislock.NewClient) to give up redialling.
func TestPaymentsRedisDown(t *testing.T) {
	r, rdb, _ := startPaymentsOnRedis(t, 4*paymentsRedisDownWithin, "IDEM_FAIL_CLOSED=")
	if status, b, err := r.send(context.Background(), 0, "up", `{"amount": 1, "account": "a"}`); status != http.StatusCreated {
		t.Fatalf("with Redis up: %d %s %v", status, b, err)
	}
	rdb.kill()

	start := time.Now()
	status, b, err := r.send(context.Background(), 0, "down", `{"amount": 1, "account": "a"}`)
	if took := time.Since(start); err != nil || status != http.StatusInternalServerError || took > paymentsRedisDownWithin {
		t.Errorf("POST /payments with Redis down: %d %s %v after %v, want 500 within %v", status, b, err, took, paymentsRedisDownWithin)
	}
	start = time.Now()
	resp, err := r.client.Get("http://" + r.procs[0].addr + "/payments")
	if err == nil {
		resp.Body.Close()
		status = resp.StatusCode
	}
	if took := time.Since(start); err != nil || status != http.StatusInternalServerError || took > paymentsRedisDownWithin {
		t.Errorf("GET /payments with Redis down: %d %v after %v, want 500 within %v", status, err, took, paymentsRedisDownWithin)
	}
}

// A client that gives up while the provider is slow does not make
// examples/payments charge twice: its hang-up used to cancel the charge
// mid-flight (the provider charged anyway), the step failed, the key was
// released, and the retry sent a second charge. Now the first request runs
// to its end under the key's lock: the retry gets 409, then the payment.
func TestPaymentsClientGivesUp(t *testing.T) {
	r, _, prov := startPaymentsOnRedis(t, 30*time.Second, "IDEM_FAIL_CLOSED=1")
	signal := func(sig syscall.Signal) (pid int) {
		prov.mu.Lock()
		defer prov.mu.Unlock()
		if prov.cmd == nil {
			t.Fatalf("the provider is not running")
		}
		if err := prov.cmd.Process.Signal(sig); err != nil {
			t.Fatalf("%v to the provider: %v", sig, err)
		}
		return prov.cmd.Process.Pid
	}
	t.Cleanup(func() { signal(syscall.SIGCONT) })
	// The provider hangs: every thread of it stopped before the first
	// request, as /proc shows it (a SIGSTOP is a request to the kernel,
	// which the process's threads act on when they next run; the provider
	// once answered the first attempt with a 201, which fails the test).
	// SIGSTOP again while one is not, within the bound.
	for deadline := time.Now().Add(30 * time.Second); ; {
		states, stopped := threadStates(t, signal(syscall.SIGSTOP))
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provider's threads are not stopped after SIGSTOP: %s", states)
		}
		time.Sleep(10 * time.Millisecond)
	}

	const body = `{"amount": 700, "account": "a"}`
	for attempt := range 2 { // the client gives up after 1 s, twice
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		status, b, err := r.send(ctx, 0, "slow", body)
		cancel()
		if err == nil && status != http.StatusConflict {
			t.Fatalf("attempt %d with the provider hung: %d %s, want the client's timeout or 409", attempt, status, b)
		}
		time.Sleep(300 * time.Millisecond)
	}
	signal(syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		status, b, err := r.send(ctx, 0, "slow", body)
		if status == http.StatusCreated {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no 201 after the provider came back; the last: %d %s %v", status, b, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var charges struct {
		Count   int `json:"count"`
		Charges []any
	}
	getJSON(t, r.client, r.provider+"/charges", &charges)
	if charges.Count != 1 {
		t.Errorf("the provider charged %d times, want 1: %v", charges.Count, charges.Charges)
	}
}
