//go:build integration

package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The transactional mode under process kills (issue 23's "Done when"):
// three instances of an example on one PostgreSQL database, a random one
// SIGKILLed and restarted on its address every killEvery for killFor,
// under txClients clients that each send fresh keys and retry each on
// another instance until it gets a 201. Counts are checked; the waits for
// a 201 after a death are printed (docs/pgstore.md has one run's figures).

const (
	killEvery  = 700 * time.Millisecond
	killFor    = 30 * time.Second
	txClients  = 24
	orderDelay = 20 // delay_ms of each order: a kill lands mid-handler
	// finishFor is how long a client may still retry its last key after
	// the kills: the lease mode's keys wait out the initial lease.
	finishFor = initialLease + 5*time.Second
	// maxChaosRequests bounds the requests of a run.
	maxChaosRequests = 100000
	// poolConns is each instance's pool (pool_max_conns): the clients
	// spread over the two instances that are up, one connection per
	// running handler in the transactional mode (docs/pgstore.md).
	poolConns = txClients / 2
)

// TestTxKills runs the kills on examples/nethttp and examples/gin in the
// transactional mode (DATABASE_URL alone), where every key must end with
// exactly one order and one stored record, and on examples/nethttp with
// IDEM_TX=0 (the lease mode), the contrast: its doubled keys are printed,
// not checked.
func TestTxKills(t *testing.T) {
	for _, tc := range []struct {
		fw    string
		lease bool
	}{{"nethttp", false}, {"gin", false}, {"nethttp", true}} {
		name := map[bool]string{false: "transactional", true: "lease"}[tc.lease]
		t.Run(tc.fw+"/"+name, func(t *testing.T) {
			dbURL := postgresSchema(t)
			tx := ""
			if tc.lease {
				tx = "0"
			}
			c := startChaos(t, build(t, tc.fw), dbURL+"&pool_max_conns="+fmt.Sprint(poolConns),
				"REDIS_URL=", "IDEM_TX="+tx, "IDEM_OFF=", "IDEM_FAIL_CLOSED=1", "GIN_MODE=release")
			keys, kills := c.run(killFor)
			c.report(t, tc.fw+", "+name, dbURL, keys, kills, !tc.lease)
		})
	}
}

// proc is an example process that can be SIGKILLed and restarted on its
// address.
type proc struct {
	bin  string
	addr string
	env  []string
	logs *lockedBuffer // of every process run so far

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	listen int           // "listening" lines in logs before cmd started
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs the process; it does not wait for it to listen.
func (p *proc) start() error {
	listens := strings.Count(p.logs.String(), "listening")
	cmd := exec.Command(p.bin)
	cmd.Env = append(append(os.Environ(), "ADDR="+p.addr), p.env...)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // killed
	p.mu.Lock()
	p.cmd, p.done, p.listen = cmd, done, listens
	p.mu.Unlock()
	return nil
}

// kill sends SIGKILL and returns once the process is gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill() //nolint:errcheck // it may have exited
	<-done
}

// listening returns once the process accepts connections on its address:
// it logged that it listens (another process may have taken the port
// freePort chose, and would answer the dial) and the address answers.
func (p *proc) listening(within time.Duration) error {
	p.mu.Lock()
	cmd, done, before := p.cmd, p.done, p.listen
	p.mu.Unlock()
	deadline := time.Now().Add(within)
	for {
		if strings.Count(p.logs.String(), "listening") > before {
			c, err := net.DialTimeout("tcp", p.addr, 100*time.Millisecond)
			if err == nil {
				c.Close()
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited at start (%v): %w", p.bin, cmd.ProcessState, errExited)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %v", p.bin, p.addr, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errExited = errors.New("exited before listening")

// restart starts p again and waits until it listens. A process that ends
// before it writes a line is started again, up to three times: one restart
// in CI ended so, with nothing in its log, where every exit of the examples
// logs why; the tests are about what the instances do once up.
func (p *proc) restart(t *testing.T, within time.Duration) error {
	for attempt := 1; ; attempt++ {
		logged := len(p.logs.String())
		err := p.start()
		if err == nil {
			err = p.listening(within)
		}
		if err == nil || !errors.Is(err, errExited) || len(p.logs.String()) != logged || attempt == 3 {
			return err
		}
		t.Logf("%s on %s, attempt %d: %v; starting it again", p.bin, p.addr, attempt, err)
	}
}

// chaos is three instances and their clients.
type chaos struct {
	t      *testing.T
	procs  []*proc
	client *http.Client
	sent   atomic.Int64
}

func startChaos(t *testing.T, bin, dbURL string, env ...string) *chaos {
	t.Helper()
	c := &chaos{t: t, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(c.client.CloseIdleConnections)
	for range 3 {
		p := &proc{bin: bin, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), env: append([]string{"DATABASE_URL=" + dbURL}, env...),
			logs: &lockedBuffer{}}
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.kill()
			if t.Failed() {
				l := p.logs.String()
				t.Logf("%s log (last 4 KiB):\n%s", p.addr, l[max(0, len(l)-4096):])
			}
		})
		c.procs = append(c.procs, p)
	}
	for _, p := range c.procs {
		if err := p.listening(30 * time.Second); err != nil {
			t.Fatalf("%v:\n%s", err, p.logs.String())
		}
	}
	return c
}

// kill is one SIGKILL and the restart after it.
type kill struct {
	inst int
	at   time.Time
	up   time.Duration // from the kill until the new process listened
}

// chaosKey is one key and every request sent with it.
type chaosKey struct {
	key     string
	answers []answer
}

// stored returns the first 201, if any.
func (k *chaosKey) stored() (answer, bool) {
	i := slices.IndexFunc(k.answers, func(a answer) bool { return a.status == http.StatusCreated })
	if i < 0 {
		return answer{}, false
	}
	return k.answers[i], true
}

// run kills and restarts a random instance every killEvery for d, under
// txClients clients, then lets each finish its last key (up to
// finishFor), and returns every key and every kill.
func (c *chaos) run(d time.Duration) ([]*chaosKey, []kill) {
	c.t.Helper()
	start := time.Now()
	end := start.Add(d)
	var (
		mu   sync.Mutex
		keys []*chaosKey
		wg   sync.WaitGroup
	)
	for n := range txClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := c.drive(n, end, end.Add(finishFor))
			mu.Lock()
			keys = append(keys, mine...)
			mu.Unlock()
		}()
	}
	var kills []kill
	var killErr error
	for at := start.Add(killEvery); at.Before(end); at = at.Add(killEvery) {
		time.Sleep(time.Until(at))
		i := rand.IntN(len(c.procs))
		p := c.procs[i]
		k := kill{inst: i, at: time.Now()}
		p.kill()
		killErr = p.restart(c.t, 10*time.Second)
		k.up = time.Since(k.at)
		kills = append(kills, k)
		if killErr != nil {
			break
		}
	}
	wg.Wait()
	if killErr != nil {
		c.t.Fatalf("restart: %v:\n%s", killErr, c.procs[kills[len(kills)-1].inst].logs.String())
	}
	return keys, kills
}

// drive is client n: until end, a fresh key at a time, sent to a random
// instance and, until a 201, to another one after each failure (409, 503,
// a transport error), waiting 20 ms doubling to 500 ms between tries. The
// last key is retried up to finish.
func (c *chaos) drive(n int, end, finish time.Time) []*chaosKey {
	var keys []*chaosKey
	for seq := 0; time.Now().Before(end) && c.sent.Load() < maxChaosRequests; seq++ {
		k := &chaosKey{key: fmt.Sprintf("kill-%d-%d", n, seq)}
		keys = append(keys, k)
		inst, backoff := rand.IntN(len(c.procs)), 20*time.Millisecond
		for {
			a := c.send(inst, k.key)
			k.answers = append(k.answers, a)
			if a.status == http.StatusCreated || (a.status >= 400 && a.status < 500 && a.status != http.StatusConflict) ||
				!time.Now().Before(finish) || c.sent.Load() >= maxChaosRequests {
				break // stored, or a bug the checks report, or out of time
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, 500*time.Millisecond)
			inst = (inst + 1 + rand.IntN(len(c.procs)-1)) % len(c.procs)
		}
	}
	return keys
}

// send posts key's order to instance i.
func (c *chaos) send(i int, key string) answer {
	c.sent.Add(1)
	return postOrder(c.client, "http://"+c.procs[i].addr, i, "kills", key, orderDelay)
}

// death returns when the first request of k that a kill cut off was cut
// off: the kill of its instance while it was in flight.
func death(k *chaosKey, kills []kill) (time.Time, bool) {
	for _, a := range k.answers {
		if a.status != 0 {
			continue
		}
		for _, kl := range kills {
			if kl.inst == a.inst && a.sent.Before(kl.at) && !a.done.Before(kl.at) {
				return kl.at, true
			}
		}
	}
	return time.Time{}, false
}

// report prints the run's figures, from the clients, PostgreSQL and
// GET /orders, and, if strict, fails the test unless every key got a 201,
// has exactly one order, the one its 201s carry, and one stored record.
func (c *chaos) report(t *testing.T, name, dbURL string, keys []*chaosKey, kills []kill, strict bool) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT item, 'ord_' || id FROM idem_example_orders ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	orders := map[string][]string{}
	var total int
	for rows.Next() {
		var item, id string
		if err := rows.Scan(&item, &id); err != nil {
			t.Fatal(err)
		}
		orders[item] = append(orders[item], id)
		total++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var completed, processing int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'processing')
	FROM idempotency_keys`).Scan(&completed, &processing); err != nil {
		t.Fatal(err)
	}
	// An order's id is drawn from its sequence by the INSERT and never
	// given back: the ids drawn and not committed are the inserts rolled
	// back, by a kill after the handler's insert and before the commit.
	var drawn int
	if err := conn.QueryRow(ctx, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM idem_example_orders_id_seq").Scan(&drawn); err != nil {
		t.Fatal(err)
	}
	listed := c.listed()

	var (
		all                      []answer
		unstored, doubled, wrong []*chaosKey
		waits                    []time.Duration
		over                     int
	)
	for _, k := range keys {
		all = append(all, k.answers...)
		first, ok := k.stored()
		ids := orders[k.key]
		switch {
		case !ok:
			unstored = append(unstored, k)
		case len(ids) > 1:
			doubled = append(doubled, k)
		}
		for _, a := range k.answers {
			if ok && (a.err != nil && a.status != 0 || a.status == http.StatusCreated && !slices.Contains(ids, a.id) ||
				a.status != 0 && a.status != http.StatusCreated && a.status != http.StatusConflict && a.status != http.StatusServiceUnavailable) {
				wrong = append(wrong, k)
				break
			}
		}
		if died, ok2 := death(k, kills); ok && ok2 {
			w := first.done.Sub(died)
			waits = append(waits, w)
			if w > 3*time.Second {
				over++
			}
		}
	}
	slices.Sort(waits)
	ups := make([]time.Duration, len(kills))
	for i, k := range kills {
		ups[i] = k.up
	}
	slices.Sort(ups)
	t.Logf("%s: %d keys from %d clients over %v, %d kills (SIGKILL to listening again: %s)",
		name, len(keys), txClients, killFor, len(kills), quantiles(ups))
	t.Logf("%s: %s", name, statuses(all))
	t.Logf("%s: orders: %d in PostgreSQL, %d by GET /orders; per key: %s; doubled keys: %d; keys without a 201: %d",
		name, total, listed, perKey(keys, orders), len(doubled), len(unstored))
	t.Logf("%s: idempotency_keys: %d completed, %d processing; %d inserted orders rolled back (a kill between the insert and the commit)",
		name, completed, processing, drawn-total)
	t.Logf("%s: %d keys had a request in flight on an instance when it was killed; their wait for the 201 after that kill: %s; over 3s: %d",
		name, len(waits), quantiles(waits), over)
	var twice []string
	for _, k := range doubled[:min(len(doubled), 5)] {
		twice = append(twice, fmt.Sprintf("%s %v", k.key, orders[k.key]))
	}
	if len(twice) > 0 {
		t.Logf("%s: doubled keys (orders): %s", name, strings.Join(twice, ", "))
	}
	for _, p := range c.procs {
		if strings.Contains(p.logs.String(), "panic:") {
			t.Errorf("%s: an instance on %s panicked:\n%s", name, p.addr, p.logs.String())
		}
	}
	if len(waits) == 0 {
		t.Errorf("%s: no kill landed on a request in flight: the run did not test anything", name)
	}
	if listed != total {
		t.Errorf("%s: GET /orders lists %d orders, PostgreSQL holds %d", name, listed, total)
	}
	if !strict {
		return
	}
	for _, k := range append(append(unstored, doubled...), wrong...)[:min(len(unstored)+len(doubled)+len(wrong), 5)] {
		died, _ := death(k, kills)
		t.Errorf("%s: key %s: orders %v, answers (times from its death, if any):\n%s", name, k.key, orders[k.key], describe(k.answers, died))
	}
	if len(unstored) > 0 || len(doubled) > 0 || len(wrong) > 0 {
		t.Errorf("%s: %d keys without a 201, %d with more than one order, %d with an unexpected answer", name, len(unstored), len(doubled), len(wrong))
	}
	if total != len(keys) {
		t.Errorf("%s: %d orders for %d keys, want one per key", name, total, len(keys))
	}
	if completed != len(keys) || processing != 0 {
		t.Errorf("%s: idempotency_keys holds %d completed and %d processing rows for %d keys, want one completed per key",
			name, completed, processing, len(keys))
	}
}

// listed returns the count of GET /orders on the first instance.
func (c *chaos) listed() int {
	c.t.Helper()
	resp, err := c.client.Get("http://" + c.procs[0].addr + "/orders")
	if err != nil {
		c.t.Fatalf("GET /orders: %v", err)
	}
	defer resp.Body.Close()
	var l struct{ Count int }
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET /orders: %d %v", resp.StatusCode, err)
	}
	return l.Count
}

// perKey returns the histogram of orders per key.
func perKey(keys []*chaosKey, orders map[string][]string) string {
	h := map[int]int{}
	for _, k := range keys {
		h[len(orders[k.key])]++
	}
	var parts []string
	for n := range 10 {
		if h[n] > 0 {
			parts = append(parts, fmt.Sprintf("%d: %d keys", n, h[n]))
		}
	}
	return strings.Join(parts, ", ")
}

// quantiles describes sorted durations.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v, p90 %v, p99 %v, max %v", q(0.5), q(0.9), q(0.99), ds[len(ds)-1].Round(time.Millisecond))
}
