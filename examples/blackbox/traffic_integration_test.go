//go:build integration

package blackbox

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The fault tests' clients: three example servers on the same store(s),
// clients that send each key twice at once and retry it as a real client
// would, and the figures they print.

// fleet is three instances of the net/http example on the same store(s):
// the examples share exampleapp, so one framework shows what the store does.
type fleet struct {
	t       *testing.T
	servers []*server
	client  *http.Client
	seq     atomic.Int64
}

func startFleet(t *testing.T, bin string, env ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, client: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 128}}}
	t.Cleanup(f.client.CloseIdleConnections)
	for range 3 {
		f.servers = append(f.servers, start(t, bin, env...))
	}
	return f
}

// newKey returns a fresh key, which is also its order's item, so that
// GET /orders tells how many times the key ran.
func (f *fleet) newKey(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), f.seq.Add(1))
}

// answer is one request and its answer.
type answer struct {
	inst       int
	sent, done time.Time
	status     int // 0: a transport error
	replay     bool
	id         string // the order's id, of a 201
	err        error
}

func (a answer) latency() time.Duration { return a.done.Sub(a.sent) }

// send posts key's order to instance i (mod 3).
func (f *fleet) send(i int, key string) answer {
	i %= len(f.servers)
	return postOrder(f.client, f.servers[i].url, i, "faults", key, 10)
}

// postOrder posts key's order, as user, to the instance at base, which is
// instance inst. The request is not replayable for net/http's Transport
// (no GetBody), which would otherwise send it again on its own, to the same
// instance, when a kept-alive connection dies. A body cut off is a
// transport error (status 0): a kill.
func postOrder(client *http.Client, base string, inst int, user, key string, delayMs int) answer {
	body := fmt.Sprintf(`{"item": %q, "qty": 1, "delay_ms": %d}`, key, delayMs)
	req, err := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.GetBody = nil
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-ID", user)
	req.Header.Set("Idempotency-Key", key)
	a := answer{inst: inst, sent: time.Now()}
	resp, err := client.Do(req)
	if err != nil {
		a.done, a.err = time.Now(), err
		return a
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.done, a.status = time.Now(), resp.StatusCode
	a.replay = resp.Header.Get("X-Idempotency-Replay") == "true"
	if err != nil {
		a.status, a.err = 0, err
		return a
	}
	if a.status == http.StatusCreated {
		var o struct {
			ID   string `json:"id"`
			Item string `json:"item"`
		}
		if err := json.Unmarshal(b, &o); err != nil || o.ID == "" || o.Item != key {
			a.err = fmt.Errorf("201 body %s for key %s", b, key)
		}
		a.id = o.ID
	}
	return a
}

// orders returns the ids of the orders created, by item (key): from
// GET /orders, so what the order service really holds.
func (f *fleet) orders() map[string][]string {
	f.t.Helper()
	resp, err := f.client.Get(f.servers[0].url + "/orders")
	if err != nil {
		f.t.Fatalf("GET /orders: %v", err)
	}
	defer resp.Body.Close()
	var l struct {
		Orders []struct {
			ID   string `json:"id"`
			Item string `json:"item"`
		} `json:"orders"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != http.StatusOK {
		f.t.Fatalf("GET /orders: %d %v", resp.StatusCode, err)
	}
	m := make(map[string][]string)
	for _, o := range l.Orders {
		m[o.Item] = append(m[o.Item], o.ID)
	}
	return m
}

// metric returns the sum over the instances of an unlabelled metric of
// GET /metrics.
func (f *fleet) metric(name string) float64 {
	f.t.Helper()
	var sum float64
	for _, s := range f.servers {
		resp, err := f.client.Get(s.url + "/metrics")
		if err != nil {
			f.t.Fatalf("GET /metrics: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					f.t.Fatalf("/metrics: %q", l)
				}
				sum += n
			}
		}
	}
	return sum
}

// keyRun is one key of the traffic: every request sent with it.
type keyRun struct {
	key     string
	first   time.Time // its first request was sent
	answers []answer  // guarded by traffic.mu
}

// traffic sends fresh keys from concurrent clients and retries them.
type traffic struct {
	f     *fleet
	retry time.Duration // between a client's retries of a key
	max   int64         // requests in all, a bound on the test's load

	mu   sync.Mutex
	keys []*keyRun
	sent atomic.Int64
}

func newTraffic(f *fleet, retry time.Duration) *traffic {
	return &traffic{f: f, retry: retry, max: 20000}
}

func (tr *traffic) record(k *keyRun, a answer) {
	tr.mu.Lock()
	k.answers = append(k.answers, a)
	tr.mu.Unlock()
}

// stored reports whether the key got a 201 (the order, or its replay).
func (tr *traffic) stored(k *keyRun) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.ContainsFunc(k.answers, func(a answer) bool { return a.status == http.StatusCreated })
}

func (tr *traffic) send(k *keyRun, i int) answer {
	tr.sent.Add(1)
	a := tr.f.send(i, k.key)
	tr.record(k, a)
	return a
}

// drive sends k, starting on instance i, until it gets a 201 or until
// deadline: after a 201 one more request on another instance, which must
// be its replay; after a 409, 503, 500 or a transport error a retry on the
// next instance, tr.retry later. With first set the key's first send is
// two requests at once on two instances.
func (tr *traffic) drive(k *keyRun, i int, deadline time.Time, first bool) {
	if first {
		var wg sync.WaitGroup
		for j := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); tr.send(k, i+j) }()
		}
		wg.Wait()
		i += 2
	}
	for !tr.stored(k) {
		if !time.Now().Before(deadline) || tr.sent.Load() >= tr.max {
			return
		}
		time.Sleep(tr.retry)
		a := tr.send(k, i)
		i++
		if a.status >= 400 && a.status < 500 && a.status != http.StatusConflict {
			return // a bug: the checks report it
		}
	}
	tr.send(k, i)
}

// run starts clients: a fresh key every interval, each driven by a client
// of its own for up to retryFor (a request may wait for the store, and the
// keys keep coming meanwhile). stop sends no new key and waits for the
// clients.
func (tr *traffic) run(interval time.Duration, prefix string, retryFor time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; tr.sent.Load() < tr.max; i++ {
			k := &keyRun{key: tr.f.newKey(prefix), first: time.Now()}
			tr.mu.Lock()
			tr.keys = append(tr.keys, k)
			tr.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr.drive(k, i, k.first.Add(retryFor), true)
			}()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// settle retries every key not yet stored, every retry, at most 32 at a
// time, until each gets a 201 or deadline passes. No client may run.
func (tr *traffic) settle(deadline time.Time, retry time.Duration) {
	tr.retry = retry
	tr.mu.Lock()
	keys := slices.Clone(tr.keys)
	tr.mu.Unlock()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for n, k := range keys {
		if tr.stored(k) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			tr.drive(k, n, deadline, false)
		}()
	}
	wg.Wait()
}

// all returns every key and a copy of its answers.
func (tr *traffic) all() []*keyRun {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]*keyRun, len(tr.keys))
	for i, k := range tr.keys {
		out[i] = &keyRun{key: k.key, first: k.first, answers: slices.Clone(k.answers)}
	}
	return out
}

// between returns the keys first sent in [from, to).
func between(keys []*keyRun, from, to time.Time) []*keyRun {
	var out []*keyRun
	for _, k := range keys {
		if !k.first.Before(from) && k.first.Before(to) {
			out = append(out, k)
		}
	}
	return out
}

// answers returns the answers of keys, those sent in [from, to) if from
// and to are not zero.
func answers(keys []*keyRun, from, to time.Time) []answer {
	var out []answer
	for _, k := range keys {
		for _, a := range k.answers {
			if (from.IsZero() || !a.sent.Before(from)) && (to.IsZero() || a.sent.Before(to)) {
				out = append(out, a)
			}
		}
	}
	return out
}

// checkOnce fails the test unless every key ran exactly once (one order)
// and every 201 it got is that order: one first answer, the others its
// replays.
func checkOnce(t *testing.T, what string, keys []*keyRun, orders map[string][]string) {
	t.Helper()
	bad := 0
	for _, k := range keys {
		ids, firsts := orders[k.key], 0
		ok := len(ids) == 1
		for _, a := range k.answers {
			switch {
			case a.err != nil:
				ok = false
			case a.status == http.StatusCreated:
				if !a.replay {
					firsts++
				}
				ok = ok && a.id == ids[0]
			case a.status != http.StatusConflict && a.status != http.StatusServiceUnavailable &&
				a.status != http.StatusInternalServerError: // 500: the order service failed, nothing stored
				ok = false
			}
		}
		if ok && firsts == 1 {
			continue
		}
		if bad++; bad <= 5 {
			t.Errorf("%s: key %s ran %d times (orders %v), answers:\n%s", what, k.key, len(ids), ids, describe(k.answers, k.first))
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d keys in all not run exactly once", what, bad)
	}
}

func describe(as []answer, since time.Time) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "  +%v instance %d: %d replay=%v id=%s latency %v err=%v\n",
			a.sent.Sub(since).Round(time.Millisecond), a.inst, a.status, a.replay, a.id, a.latency().Round(time.Millisecond), a.err)
	}
	return b.String()
}

// statuses counts answers: "201", "201 replay", "409", "503", "error"...
func statuses(as []answer) string {
	counts := map[string]int{}
	for _, a := range as {
		switch {
		case a.status == 0:
			counts["error"]++
		case a.replay:
			counts[strconv.Itoa(a.status)+" replay"]++
		default:
			counts[strconv.Itoa(a.status)]++
		}
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s: %d", n, counts[n]))
	}
	return fmt.Sprintf("%d requests (%s)", len(as), strings.Join(parts, ", "))
}

// latencies returns the distribution of the answers' latencies.
func latencies(as []answer) string {
	if len(as) == 0 {
		return "no requests"
	}
	ds := make([]time.Duration, len(as))
	for i, a := range as {
		ds[i] = a.latency()
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v, p90 %v, p99 %v, max %v", q(0.5), q(0.9), q(0.99), ds[len(ds)-1].Round(time.Millisecond))
}

// maxLatency returns the longest latency of as.
func maxLatency(as []answer) time.Duration {
	var m time.Duration
	for _, a := range as {
		m = max(m, a.latency())
	}
	return m
}

// runs returns the histogram of runs (orders) per key.
func runs(keys []*keyRun, orders map[string][]string) string {
	h := map[int]int{}
	for _, k := range keys {
		h[len(orders[k.key])]++
	}
	var parts []string
	for n := range 10 {
		if h[n] > 0 {
			parts = append(parts, fmt.Sprintf("%d run(s): %d", n, h[n]))
		}
	}
	return fmt.Sprintf("%d keys (%s)", len(keys), strings.Join(parts, ", "))
}

// probe is a fresh key sent to one instance and, after a 201, to another:
// protected if the second is the replay of the first.
type probe struct {
	sent      time.Time
	first     answer
	protected bool
}

// probes sends a probe every interval until until, each in its own
// goroutine (a request may wait for the store), and returns them when all
// are answered.
func (f *fleet) probes(interval time.Duration, until time.Time) func() []probe {
	var mu sync.Mutex
	var out []probe
	var wg sync.WaitGroup
	var n int
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for now := time.Now(); now.Before(until); now = <-tick.C {
			n++
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				key := f.newKey("probe")
				p := probe{sent: time.Now()}
				p.first = f.send(i, key)
				if p.first.status == http.StatusCreated && !p.first.replay {
					second := f.send(i+1, key)
					p.protected = second.replay && second.id == p.first.id
				}
				mu.Lock()
				out = append(out, p)
				mu.Unlock()
			}(n)
		}
	}()
	return func() []probe {
		wg.Wait()
		slices.SortFunc(out, func(a, b probe) int { return a.sent.Compare(b.sent) })
		return out
	}
}

// window describes the probes sent after ref: how many, when the first
// protected one and the last unprotected one were sent.
func window(ps []probe, ref time.Time) string {
	n, first, last := 0, "none", "none"
	for _, p := range ps {
		if p.sent.Before(ref) {
			continue
		}
		n++
		d := p.sent.Sub(ref).Round(100 * time.Microsecond).String()
		if p.protected && first == "none" {
			first = d
		}
		if !p.protected {
			last = d
		}
	}
	return fmt.Sprintf("%d probes sent after it: the first protected one sent %s after it, the last unprotected (or refused) one %s", n, first, last)
}

// checkProbes fails the test if a probe sent bound after ref or later was
// not protected, beyond allowed of them: the store errors counted meanwhile
// (a call that missed StoreTimeout on a busy machine; each unprotected
// probe needs one).
func checkProbes(t *testing.T, ps []probe, ref time.Time, bound time.Duration, allowed int) {
	t.Helper()
	var bad []probe
	for _, p := range ps {
		if !p.protected && !p.sent.Before(ref.Add(bound)) {
			bad = append(bad, p)
		}
	}
	if len(bad) <= allowed {
		if len(bad) > 0 {
			t.Logf("%d probes unprotected after %v, with %d store errors meanwhile", len(bad), bound, allowed)
		}
		return
	}
	for _, p := range bad {
		t.Errorf("probe sent %v after the store was back: unprotected (%d replay=%v %v)",
			p.sent.Sub(ref).Round(time.Millisecond), p.first.status, p.first.replay, p.first.err)
	}
}

// lateLocks returns how many keys got a 409 sent after ref and more than a
// second after the key's first request, when no request of theirs was
// running any more (the handler takes 10 ms): a lock that outlived its
// request, taken by the store for a request that had given up, or left by
// one whose release failed. last is when the last of those 409s was
// answered, relative to ref.
func lateLocks(keys []*keyRun, ref time.Time) (n int, last time.Duration) {
	for _, k := range keys {
		seen := false
		for _, a := range k.answers {
			if a.status == http.StatusConflict && a.sent.After(ref) && a.sent.After(k.first.Add(time.Second)) {
				seen = true
				last = max(last, a.done.Sub(ref))
			}
		}
		if seen {
			n++
		}
	}
	return n, last.Round(time.Millisecond)
}

// checkLateLocks fails the test if a lock that outlived its request refused
// retries for longer than the initial lease (and a margin) after ref.
func checkLateLocks(t *testing.T, keys []*keyRun, ref time.Time, what string) {
	t.Helper()
	n, last := lateLocks(keys, ref)
	t.Logf("locks that outlived their request: %d keys got 409 after %s and over 1s after their first request, the last answered %v after %s", n, what, last, what)
	if last > initialLease+3*time.Second {
		t.Errorf("a lock refused a retry %v after %s, want at most the initial lease (%v) and a margin", last, what, initialLease)
	}
}

// resend sends every key once more, 32 at a time, retrying a 409 or a 503
// every 250 ms until deadline, and returns each key's last answer and how
// many 409s and 503s came before.
func (tr *traffic) resend(deadline time.Time) (last []answer, conflicts int) {
	tr.mu.Lock()
	keys := slices.Clone(tr.keys)
	tr.mu.Unlock()
	var mu sync.Mutex
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for n, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for i := n; ; i++ {
				a := tr.send(k, i)
				if a.status != http.StatusConflict && a.status != http.StatusServiceUnavailable || !time.Now().Before(deadline) {
					mu.Lock()
					last = append(last, a)
					mu.Unlock()
					return
				}
				mu.Lock()
				conflicts++
				mu.Unlock()
				time.Sleep(250 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return last, conflicts
}
