//go:build integration

package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemprom"
)

// dashboardFile is idemprom's Grafana dashboard.
const dashboardFile = "../../idemprom/dashboards/idempotency.json"

// dashboard is the part of Grafana's JSON model the test reads.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			AllValue   string `json:"allValue"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// queries returns the PromQL of every panel, by title, rows' panels included.
func (d dashboard) queries() map[string][]string {
	q := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				q[p.Title] = append(q[p.Title], t.Expr)
			}
		}
	}
	walk(d.Panels)
	return q
}

// TestDashboard checks idemprom's Grafana dashboard against a real
// Prometheus (Debian's, extracted into .tools/ by make test-integration:
// $IDEM_PROMETHEUS) scraping examples/nethttp: every query names only
// metrics idemprom exports, parses, and, after traffic of every kind (first
// requests, replays, 409s, 422s, a 400, a 500, a key held in flight),
// returns data; the panels of what the traffic did show more than zero.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	panels := d.queries()
	// The panels that the traffic below makes non-zero; the others (store
	// errors, fallbacks) need a failing store, and show zeros.
	positive := []string{"Requests by outcome", "Requests by route and outcome", "Replays", "Conflicts and reused keys",
		"Request latency", "Store operation latency (p99)", "Breaker state", "Locks in flight", "Oldest in-flight lock"}
	for _, title := range append(positive, "Store errors", "Fallbacks") {
		if len(panels[title]) == 0 {
			t.Errorf("the dashboard has no panel %q with queries", title)
		}
	}
	if len(panels) != len(positive)+2 {
		t.Errorf("%d panels with queries, want %d: a new panel needs its expectation here", len(panels), len(positive)+2)
	}

	// Names: every metric a query or a variable reads is one idemprom exports.
	exported := exportedMetrics()
	vars := map[string]string{"$__rate_interval": "1m"}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		vars["$"+v.Name] = v.AllValue // the dashboard's "All"
		sel, ok := strings.CutPrefix(v.Definition, "label_values(")
		if !ok {
			t.Fatalf("variable %s: %q, want label_values(<selector>, <label>)", v.Name, v.Definition)
		}
		panels["variable "+v.Name] = []string{sel[:strings.LastIndex(sel, ",")]}
	}
	for title, exprs := range panels {
		for _, e := range exprs {
			names := metricNames(e)
			if len(names) == 0 {
				t.Errorf("%s: %q reads no metric", title, e)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("%s: %q reads %s, which idemprom does not export", title, e, n)
				}
			}
		}
	}
	for _, v := range []string{"variable job", "variable route"} {
		delete(panels, v)
	}
	if t.Failed() {
		return
	}

	// The example, and a key held in flight across Prometheus' first scrape
	// (idemprom.NewStuckKeys reads the store then) until the test ends.
	s := start(t, build(t, "nethttp"))
	slowCtx, cancelSlow := context.WithCancel(context.Background())
	t.Cleanup(cancelSlow) // before the example stops: it would wait for the request
	slow := newKey(t)
	held := make(chan result, 2)
	for range 2 {
		go func() { held <- postCtx(s, slowCtx, "dash", slow, `{"item": "clock", "qty": 1, "delay_ms": 600000}`) }()
	}
	wantProblem(t, "duplicate of the held key", <-held, http.StatusConflict, "key-in-flight")

	prom := startPrometheus(t, strings.TrimPrefix(s.url, "http://"))
	// Every query as Grafana sends it, the variables at "All": Prometheus
	// parses it (before any data: a query that does not parse fails now).
	evaluate := func(title string, exprs []string) (values []float64, ok bool) {
		ok = true
		for _, e := range exprs {
			q := e
			for v, val := range vars {
				q = strings.ReplaceAll(q, v, val)
			}
			vs, err := prom.query(q)
			if err != nil {
				t.Errorf("panel %q: query %q: %v", title, q, err)
				ok = false
			}
			values = append(values, vs...)
		}
		return values, ok
	}
	for title, exprs := range panels {
		evaluate(title, exprs)
	}
	if t.Failed() {
		return
	}
	total := func() float64 { return prom.scalar(t, `sum(idempotency_requests_total{job="idem"})`) }
	counted := func() float64 { return s.metric(t, "idempotency_requests_total") }
	prom.await(t, "a first scrape", func() bool { return total() == counted() })

	// Traffic, twice: the first wave makes every series, the second makes
	// their rates non-zero (a series' first sample has no rate).
	for wave := range 2 {
		order := `{"item": "pen", "qty": 1}`
		for i := range 3 {
			key := newKey(t)
			wantStatus(t, "first", s.post("dash", key, order), http.StatusCreated)
			wantStatus(t, "replay", s.post("dash", key, order), http.StatusCreated)
			if i == 0 {
				wantStatus(t, "other body", s.post("dash", key, `{"item": "ink", "qty": 1}`), http.StatusUnprocessableEntity)
			}
		}
		wantStatus(t, "bad key", s.post("dash", "a, b", order), http.StatusBadRequest)
		wantStatus(t, "500", s.post("dash", newKey(t), `{"item": "boom", "qty": 1}`), http.StatusInternalServerError)
		wantStatus(t, "held key", s.post("dash", slow, `{"item": "clock", "qty": 1, "delay_ms": 600000}`), http.StatusConflict)
		want := counted()
		prom.await(t, fmt.Sprintf("a scrape after wave %d", wave+1), func() bool { return total() == want })
	}

	for title, exprs := range panels {
		values, ok := evaluate(title, exprs)
		switch {
		case !ok:
		case len(values) == 0:
			t.Errorf("panel %q: no data; queries %q", title, exprs)
		case slices.Contains(positive, title) && !anyPositive(values):
			t.Errorf("panel %q: values %v, want one above zero; queries %q", title, values, exprs)
		}
	}
}

// exportedMetrics are the names of the series idemprom exports: a
// Collector's and NewStuckKeys', with the _bucket, _sum and _count series
// of the histograms.
func exportedMetrics() map[string]bool {
	c, _ := idemprom.New(nil, nil)
	stuck := idemprom.NewStuckKeys(core.NewMemoryStore(0), 0)
	ch := make(chan *prometheus.Desc, 16)
	c.Describe(ch)
	stuck.Describe(ch)
	close(ch)
	names := map[string]bool{}
	for desc := range ch {
		names[regexp.MustCompile(`fqName: "([a-z_]+)"`).FindStringSubmatch(desc.String())[1]] = true
	}
	// A sample in every family of c, to read their types.
	c.Observe(core.Event{Outcome: core.OutcomeStored, Method: http.MethodPost, Route: "/"})
	c.InstrumentStore(core.NewMemoryStore(0)).Acquire(context.Background(), "k", time.Minute) //nolint:errcheck
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+suffix] = true
			}
		}
	}
	return names
}

// metricNames returns the metric names of PromQL expression e: its
// identifiers once string literals, label matchers ({...}), ranges ([...])
// and the label lists of by, without, on, ignoring, group_left and
// group_right are removed, but for function names (followed by "("),
// keywords and numbers.
func metricNames(e string) []string {
	for _, re := range []string{`"(?:[^"\\]|\\.)*"`, `\{[^}]*\}`, `\[[^\]]*\]`, `\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`} {
		e = regexp.MustCompile(re).ReplaceAllString(e, " ")
	}
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
	var names []string
	for _, m := range regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`).FindAllStringSubmatch(e, -1) {
		if id := strings.TrimRight(strings.TrimSuffix(strings.TrimSpace(m[0]), "("), " "); m[1] == "" && !keywords[strings.ToLower(id)] {
			names = append(names, id)
		}
	}
	return names
}

// postCtx posts an order bounded by ctx alone, not by s.client's timeout:
// a held request lasts as long as the test needs it.
func postCtx(s *server, ctx context.Context, user, key, body string) result {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-ID", user)
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Transport: s.client.Transport}).Do(req)
	if err != nil {
		return result{}
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body) //nolint:errcheck
	return result{status: resp.StatusCode, header: resp.Header, body: b.Bytes()}
}

// metric returns the sum of the samples of name on the example's /metrics.
func (s *server) metric(t *testing.T, name string) float64 {
	t.Helper()
	r := s.do(mustRequest(http.MethodGet, s.url+"/metrics"))
	var sum float64
	for _, l := range strings.Split(string(r.body), "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			v, err := strconv.ParseFloat(l[strings.LastIndex(l, " ")+1:], 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", l, err)
			}
			sum += v
		}
	}
	return sum
}

// promServer is a Prometheus process of the test's own.
type promServer struct {
	url    string
	client *http.Client
}

// startPrometheus runs Prometheus on a free loopback port, scraping
// target's /metrics every second as job "idem", and returns once it is
// ready; t.Cleanup stops it. Each API call is bounded; the process is
// killed if it does not stop within 10 s.
func startPrometheus(t *testing.T, target string) *promServer {
	t.Helper()
	bin := os.Getenv("IDEM_PROMETHEUS")
	if bin == "" {
		bin, _ = exec.LookPath("prometheus")
	}
	if bin == "" {
		if p, err := filepath.Abs("../../.tools/prometheus"); err == nil {
			if _, err := os.Stat(p); err == nil {
				bin = p
			}
		}
	}
	if bin == "" {
		t.Fatal("prometheus not found: make test-integration extracts it from Debian's prometheus package into .tools/ (or set IDEM_PROMETHEUS)")
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"+
		"scrape_configs:\n  - job_name: idem\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill() //nolint:errcheck
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	p := &promServer{url: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
	p.await(t, "Prometheus ready", func() bool {
		select {
		case <-done:
			t.Fatalf("prometheus exited at start:\n%s", logs.String())
		default:
		}
		resp, err := p.client.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// await polls cond every 100 ms for up to 60 s.
func (p *promServer) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 60s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query evaluates q now through the HTTP API and returns its values (one
// per series of a vector, one for a scalar), or Prometheus' error (a query
// that does not parse: bad_data).
func (p *promServer) query(q string) ([]float64, error) {
	resp, err := p.client.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%d: %w", resp.StatusCode, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	var samples [][2]any
	switch r.Data.ResultType {
	case "scalar":
		var s [2]any
		json.Unmarshal(r.Data.Result, &s) //nolint:errcheck
		samples = append(samples, s)
	case "vector":
		var v []struct {
			Value [2]any `json:"value"`
		}
		json.Unmarshal(r.Data.Result, &v) //nolint:errcheck
		for _, s := range v {
			samples = append(samples, s.Value)
		}
	default:
		return nil, fmt.Errorf("result type %s", r.Data.ResultType)
	}
	var values []float64
	for _, s := range samples {
		f, err := strconv.ParseFloat(fmt.Sprint(s[1]), 64)
		if err != nil {
			return nil, fmt.Errorf("value %v", s[1])
		}
		values = append(values, f)
	}
	return values, nil
}

// scalar is the single value of q, NaN if it has none.
func (p *promServer) scalar(t *testing.T, q string) float64 {
	t.Helper()
	v, err := p.query(q)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	if len(v) == 1 {
		return v[0]
	}
	return math.NaN()
}

func anyPositive(values []float64) bool {
	for _, v := range values {
		if v > 0 {
			return true
		}
	}
	return false
}
