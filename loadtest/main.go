// Command loadtest measures idem under load with wrk (make loadtest). It
// serves, on loopback ports of this process, one small JSON handler (it
// decodes the request body and encodes a ~100-byte response) on net/http:
//
//	POST /bare                 without the middleware: the baseline
//	POST /orders               behind core.Engine.Middleware on redislock, as
//	                           configured by default (its scripts batched)
//	POST /orders-unbatched     the same with redislock.Options.DisableBatching
//	POST /orders-autopipeline  the same over go-redis's AutoPipeliner (on which
//	                           the store does not batch)
//	POST /orders-cache         the default Redis store with Config.ReplayCache
//	POST /orders-memory        behind the middleware on the memory store
//	POST /orders-postgres      behind the middleware on pgstore, with -postgres
//	POST /insert               with -postgres: the handler also inserts the
//	                           order into a table (as the examples' POST
//	                           /orders on DATABASE_URL), without idem
//	POST /insert-tx            that handler behind the middleware on pgstore's
//	                           transactional mode (the insert, the key and
//	                           the response commit together)
//	POST /insert-lease         that handler on pgstore's lease mode
//	                           (IDEM_TX=0: separate commits)
//
// and the same handler on Fiber v2 (fiber.go): bare, behind fiberidem on
// the memory store, and behind Fiber's own middleware/idempotency on its
// memory storage. It runs wrk with idem.lua in phases: the bare handlers,
// no key, then first requests (a fresh key per request: lock, handler,
// store) and replays (one fixed key) on each. A round runs each phase once,
// in alternating order from round to round, each between two runs of its
// baseline: its server's bare handler sent the same requests (bare,
// bare-fresh, bare-fixed, and fiber-bare... likewise), or for the -tx-
// phases the insert without idem. Its throughput is divided by the mean of
// those two, and the median of those ratios over the rounds is reported,
// so that a slow stretch of a shared machine moves a phase and its
// baseline together.
//
//	go run . -redis redis://127.0.0.1:6379/0 -duration 2s -rounds 5
//	go run . -phases fiber-bare-fresh,fiber-bare-fixed,fiber-first,fiber-replay,fiber-builtin-first,fiber-builtin-replay
//	go run . -postgres postgres://postgres@127.0.0.1:5432/test -phases bare-fresh,bare-fixed,first-postgres,replay-postgres
//	go run . -postgres postgres://postgres@127.0.0.1:5432/test \
//	  -phases bare-tx-postgres,first-tx-postgres,replay-tx-postgres,first-lease-tx-postgres,replay-lease-tx-postgres
//
// With -postgres the run creates a database of its own and drops it at the
// end (CREATEDB and PostgreSQL 13 or later: DROP DATABASE ... WITH (FORCE)).
// The -tx- phases also print their commits per request (the
// pg_stat_database.xact_commit delta of the run's database over wrk's
// request count) and this process's CPU time per request.
//
// Records are written under a key prefix of the run's own, with a TTL a
// minute longer than the run (so that Redis expiring them does not take CPU
// from a later phase), and deleted at the end; on PostgreSQL, in a schema
// of the run's own, dropped at the end.
package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/redislock"
)

//go:embed idem.lua
var script []byte

// An order is what the handler decodes from the request body and encodes
// back (about 100 bytes of JSON), like the examples' POST /orders: a
// baseline that skipped that work would make every cost of idem look larger
// than it is next to a real handler.
type order struct {
	ID       string `json:"id"`
	Item     string `json:"item"`
	Qty      int    `json:"qty"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

// A phase is one wrk run: a request mode of idem.lua against a path, of
// the net/http server or, with fiber, of the Fiber v2 app.
type phase struct {
	name, mode, path, description string
	target                        float64 // the ratio to its baseline to reach; 0 for none
	fiber                         bool
	baseline                      string // the phase it is compared with, if not its server's bare handler
}

// base returns the name of p's baseline, p.baseline if set, else the bare
// handler of its server sent the same requests (wrk's same mode: no key, a
// fresh key per request, one fixed key), so that a ratio measures the
// middleware rather than the key header's bytes or wrk's time building
// fresh keys, which shares the server's cores.
func (p phase) base() string {
	if p.baseline != "" {
		return p.baseline
	}
	name := "bare"
	if p.fiber {
		name = "fiber-bare"
	}
	if p.mode != "none" {
		name += "-" + p.mode
	}
	return name
}

func (p phase) isBase() bool { return p.name == p.base() }

var allPhases = []phase{
	{"bare", "none", "/bare", "bare handler (no middleware)", 0, false, ""},
	{"bare-fresh", "fresh", "/bare", "bare handler, fresh keys", 0, false, ""},
	{"bare-fixed", "fixed", "/bare", "bare handler, one fixed key", 0, false, ""},
	{"no-key", "none", "/orders", "no key", 0.95, false, ""},
	{"first", "fresh", "/orders", "first requests", 0.50, false, ""},
	{"replay", "fixed", "/orders", "replays", 0.45, false, ""},
	{"first-unbatched", "fresh", "/orders-unbatched", "first requests, unbatched", 0, false, ""},
	{"replay-unbatched", "fixed", "/orders-unbatched", "replays, unbatched", 0, false, ""},
	{"first-autopipeline", "fresh", "/orders-autopipeline", "first requests, AutoPipeliner", 0, false, ""},
	{"replay-autopipeline", "fixed", "/orders-autopipeline", "replays, AutoPipeliner", 0, false, ""},
	{"replay-cache", "fixed", "/orders-cache", "replays, Redis + ReplayCache", 0.80, false, ""},
	{"first-memory", "fresh", "/orders-memory", "first requests, memory store", 0.80, false, ""},
	{"replay-memory", "fixed", "/orders-memory", "replays, memory store", 0.95, false, ""},
	{"fiber-bare", "none", "/bare", "Fiber v2: bare handler", 0, true, ""},
	{"fiber-bare-fresh", "fresh", "/bare", "Fiber v2: bare, fresh keys", 0, true, ""},
	{"fiber-bare-fixed", "fixed", "/bare", "Fiber v2: bare, one fixed key", 0, true, ""},
	{"fiber-first", "fresh", "/orders", "Fiber v2: fiberidem, first requests", 0.85, true, ""},
	{"fiber-replay", "fixed", "/orders", "Fiber v2: fiberidem, replays", 0.97, true, ""},
	{"fiber-builtin-first", "fresh", "/orders-builtin", "Fiber v2: built-in, first requests", 0, true, ""},
	{"fiber-builtin-replay", "fixed", "/orders-builtin", "Fiber v2: built-in, replays", 0, true, ""},
	{"first-postgres", "fresh", "/orders-postgres", "first requests, PostgreSQL", 0.20, false, ""},
	{"replay-postgres", "fixed", "/orders-postgres", "replays, PostgreSQL", 0.35, false, ""},
	// The handlers of the -tx phases insert an order row, as the examples'
	// POST /orders on DATABASE_URL, and are compared with that insert
	// without idem (the examples' IDEM_OFF=1).
	{"bare-tx-postgres", "none", "/insert", "PostgreSQL: insert, no idem", 0, false, "bare-tx-postgres"},
	{"first-tx-postgres", "fresh", "/insert-tx", "PostgreSQL tx mode: first requests", 0.75, false, "bare-tx-postgres"},
	{"replay-tx-postgres", "fixed", "/insert-tx", "PostgreSQL tx mode: replays", 1.0, false, "bare-tx-postgres"},
	{"first-lease-tx-postgres", "fresh", "/insert-lease", "PostgreSQL IDEM_TX=0: first requests", 0, false, "bare-tx-postgres"},
	{"replay-lease-tx-postgres", "fixed", "/insert-lease", "PostgreSQL IDEM_TX=0: replays", 0, false, "bare-tx-postgres"},
}

// versus are the phases compared with another phase rather than with a
// bare handler: fiberidem with Fiber's own middleware.
var versus = []struct {
	phase, other, description string
	target                    float64
}{
	{"fiber-first", "fiber-builtin-first", "fiberidem / built-in, first", 0.95},
	{"fiber-replay", "fiber-builtin-replay", "fiberidem / built-in, replays", 0},
}

func main() {
	defURL := os.Getenv("REDIS_URL")
	if defURL == "" {
		defURL = "redis://127.0.0.1:6379/0"
	}
	var names, redisNames []string
	for _, p := range allPhases {
		names = append(names, p.name)
		if !strings.HasSuffix(p.name, "-postgres") {
			redisNames = append(redisNames, p.name)
		}
	}
	redisURL := flag.String("redis", defURL, "Redis URL (default $REDIS_URL)")
	duration := flag.Duration("duration", 2*time.Second, "length of each wrk run")
	connections := flag.Int("connections", 32, "wrk connections")
	threads := flag.Int("threads", 1, "wrk threads")
	rounds := flag.Int("rounds", 5, "rounds of the phases")
	flushDelay := flag.Duration("flush-delay", 0, "MaxFlushDelay of the AutoPipeliner (go-redis default: 0)")
	pgURL := flag.String("postgres", "", "PostgreSQL URL: adds the pgstore phases")
	only := flag.String("phases", "", "the phases to run, comma-separated (ratios need their baselines; default: all, the pgstore ones with -postgres)")
	cpuprofile := flag.String("cpuprofile", "", "write the server's CPU profile over the whole run to this file")
	memprofile := flag.String("memprofile", "", "write the server's allocation profile (every allocation of the run) to this file")
	flag.Parse()

	if *rounds < 1 {
		log.Fatal("-rounds must be at least 1")
	}
	if *only == "" {
		*only = strings.Join(redisNames, ",")
		if *pgURL != "" {
			*only = strings.Join(names, ",")
		}
	}
	var phases []phase
	for _, name := range strings.Split(*only, ",") {
		i := slices.IndexFunc(allPhases, func(p phase) bool { return p.name == name })
		switch {
		case i < 0:
			log.Fatalf("unknown phase %q (known: %s)", name, strings.Join(names, ", "))
		case slices.Contains(phases, allPhases[i]):
			log.Fatalf("phase %q twice in -phases", name)
		case strings.HasSuffix(name, "-postgres") && *pgURL == "":
			log.Fatalf("phase %q needs -postgres", name)
		}
		phases = append(phases, allPhases[i])
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memprofile != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memprofile)
			if err != nil {
				log.Fatal(err)
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				log.Fatal(err)
			}
		}()
	}
	err := run(*redisURL, *pgURL, phases, *duration, *connections, *threads, *rounds, *flushDelay)
	if err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

type outcomes [core.OutcomeLockLost + 1]atomic.Int64

// replayCache is the Config.ReplayCache of the /orders-cache Engine.
const replayCache = 64 << 20

func run(redisURL, pgURL string, phases []phase, duration time.Duration, connections, threads, rounds int, flushDelay time.Duration) error {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		return fmt.Errorf("wrk not found (apt-get install wrk): %w", err)
	}
	dir, err := os.MkdirTemp("", "idem-loadtest")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	scriptPath := filepath.Join(dir, "idem.lua")
	if err := os.WriteFile(scriptPath, script, 0o644); err != nil {
		return err
	}

	client, err := redislock.NewClient(redisURL)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	apOpts := redis.DefaultBlockingAutoPipelineOptions() // client.AutoPipeline()'s
	apOpts.MaxFlushDelay = flushDelay
	ap, err := client.AutoPipelineWithOptions(apOpts)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	defer ap.Close()
	prefix := "idemload:" + rand.Text()
	defer cleanup(client, prefix)

	var (
		seen     outcomes
		canceled atomic.Int64
		firstErr atomic.Value // the first store error, for the report
	)
	observe := func(ev core.Event) {
		if ev.Outcome == core.OutcomeStoreError && errors.Is(ev.Err, context.Canceled) {
			canceled.Add(1) // wrk closed the connection at the end of a phase
			return
		}
		if ev.Outcome == core.OutcomeStoreError && ev.Err != nil {
			firstErr.CompareAndSwap(nil, ev.Err.Error())
		}
		seen[ev.Outcome].Add(1)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.ID, o.Amount, o.Currency, o.Status = "ord_2J8Hq3kVx9", 4200, "EUR", "created"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(o)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /bare", handler)
	// The run's length: a warm-up second per phase, and in each round every
	// phase and up to two runs of its baseline.
	length := time.Duration(len(phases))*time.Second + time.Duration(rounds*3*len(phases))*duration
	for _, store := range []struct {
		path  string
		c     redis.Scripter
		opts  redislock.Options
		cache int64
	}{
		{"/orders", client, redislock.Options{Prefix: prefix}, 0},
		{"/orders-unbatched", client, redislock.Options{Prefix: prefix, DisableBatching: true}, 0},
		{"/orders-autopipeline", ap, redislock.Options{Prefix: prefix}, 0},
		{"/orders-cache", client, redislock.Options{Prefix: prefix}, replayCache},
	} {
		rs, err := redislock.New(store.c, &store.opts)
		if err != nil {
			return err
		}
		eng, err := core.New(core.Config{
			Store:       rs,
			ResponseTTL: length + time.Minute,
			Observer:    observe,
			ReplayCache: store.cache,
		})
		if err != nil {
			return err
		}
		mux.Handle("POST "+store.path, eng.Middleware(handler))
	}
	memEngine := func() (*core.Engine, error) {
		// Room for every first request of a run: a full store refuses new
		// keys (ErrStoreFull) rather than evict live ones.
		store := core.NewMemoryStore(2_000_000)
		return core.New(core.Config{Store: store, ResponseTTL: length + time.Minute, Observer: observe})
	}
	eng, err := memEngine()
	if err != nil {
		return err
	}
	mux.Handle("POST /orders-memory", eng.Middleware(handler))
	fixedPaths := []string{"/orders", "/orders-unbatched", "/orders-autopipeline", "/orders-cache", "/orders-memory"}
	var (
		pool   *pgxpool.Pool
		pgConn *pgx.ConnConfig
	)
	if pgURL != "" {
		pg, err := postgresStores(pgURL)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		defer pg.close()
		pool, pgConn = pg.pool, pg.conn
		insert := insertHandler(pg.pool, pg.orders)
		mux.Handle("POST /insert", insert)
		for _, s := range []struct {
			path    string
			store   core.Store
			handler http.Handler
		}{{"/orders-postgres", pg.lease, handler}, {"/insert-tx", pg.tx, insert}, {"/insert-lease", pg.lease, insert}} {
			eng, err := core.New(core.Config{Store: s.store, ResponseTTL: length + time.Minute, Observer: observe})
			if err != nil {
				return err
			}
			mux.Handle("POST "+s.path, eng.Middleware(s.handler))
			fixedPaths = append(fixedPaths, s.path)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	fixedKey := func(path string) string { return prefix + "-fixed" + path }

	fiberEng, err := memEngine()
	if err != nil {
		return err
	}
	fiberBase, stopFiber, err := fiberServer(fiberEng, length+time.Minute)
	if err != nil {
		return err
	}
	defer stopFiber()
	url := func(p phase) string {
		if p.fiber {
			return fiberBase
		}
		return base
	}
	for _, path := range []string{"/orders", "/orders-builtin"} {
		fixedPaths = append(fixedPaths, "fiber:"+path)
	}

	// Each store's fixed key gets its first request now, so that its replay
	// phases are replays only (the path is part of the fingerprint: one key
	// per path).
	for _, path := range fixedPaths {
		server := base
		if p, ok := strings.CutPrefix(path, "fiber:"); ok {
			server, path = fiberBase, p
		}
		req, _ := http.NewRequest(http.MethodPost, server+path, strings.NewReader(`{"item":"book","qty":2}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fixedKey(path))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("first request of %s's fixed key: %s", path, resp.Status)
		}
	}

	var runs int
	commits := map[string][]float64{} // per -tx- phase, commits per request in each run
	cpu := map[string][]float64{}     // per -tx- phase, this process's CPU per request in each run, µs
	wrkPhase := func(p phase, d time.Duration) (float64, error) {
		runs++ // fresh keys of their own in every run
		var (
			before, own int64
			cpu0        time.Duration
		)
		counted := pool != nil && strings.Contains(p.name, "-tx-")
		if counted {
			if before, own, err = xactCommits(pool, pgConn); err != nil {
				return 0, err
			}
			cpu0 = processCPU()
		}
		out, err := exec.Command(wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(connections),
			"-d", d.String(), "-s", scriptPath, url(p), "--",
			p.mode, p.path, prefix+"-"+strconv.Itoa(runs), fixedKey(p.path)).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("wrk %s: %v\n%s", p.name, err, out)
		}
		if m := non2xx.FindSubmatch(out); m != nil {
			return 0, fmt.Errorf("wrk %s: %s non-2xx responses\n%s", p.name, m[1], out)
		}
		m := rps.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("wrk %s: no Requests/sec in\n%s", p.name, out)
		}
		if n := requests.FindSubmatch(out); counted && n != nil {
			used := processCPU() - cpu0
			after, _, err := xactCommits(pool, pgConn)
			if err != nil {
				return 0, err
			}
			reqs, _ := strconv.ParseFloat(string(n[1]), 64)
			commits[p.name] = append(commits[p.name], float64(after-before-own)/reqs)
			cpu[p.name] = append(cpu[p.name], float64(used.Microseconds())/reqs)
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}

	if pgURL != "" {
		fmt.Printf("PostgreSQL %s (pgstore, pool of %s connections); ", redactURL(pgURL), pgPoolSize)
	}
	fmt.Printf("idem load test: Redis %s, wrk -t%d -c%d, %v per wrk run, %d rounds, GOMAXPROCS %d, AutoPipeliner MaxFlushDelay %v\n",
		redactURL(redisURL), threads, connections, duration, rounds, runtime.GOMAXPROCS(0), flushDelay)
	for _, p := range phases { // warm-up
		if _, err := wrkPhase(p, time.Second); err != nil {
			return err
		}
	}
	for i := range seen {
		seen[i].Store(0)
	}
	canceled.Store(0)
	clear(commits)
	clear(cpu)

	// Each phase runs between two runs of its server's bare handler and is
	// compared with their mean: over a whole round the machine's speed
	// drifts by more than the differences measured here, over a few seconds
	// by less.
	baseOf := map[string]int{}
	for i, p := range phases {
		if p.isBase() {
			baseOf[p.name] = i
		}
	}
	others := slices.DeleteFunc(slices.Clone(phases), phase.isBase)
	perRound := make([]map[string]result, rounds)
	for r := range rounds {
		order := slices.Clone(others)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		round := map[string]result{}
		bares := map[string][]float64{}
		last := ""
		runBase := func(name string) error {
			i, ok := baseOf[name]
			if !ok {
				return nil
			}
			v, err := wrkPhase(phases[i], duration)
			bares[name] = append(bares[name], v)
			last = name
			return err
		}
		for _, p := range order {
			b := p.base()
			if last != b {
				if err := runBase(b); err != nil {
					return err
				}
			}
			v, err := wrkPhase(p, duration)
			if err != nil {
				return err
			}
			last = p.name
			if err := runBase(b); err != nil {
				return err
			}
			res := result{rps: v}
			if bs := bares[b]; len(bs) >= 2 {
				res.bare = (bs[len(bs)-2] + bs[len(bs)-1]) / 2
			}
			round[p.name] = res
		}
		for name := range baseOf {
			if len(bares[name]) == 0 {
				if err := runBase(name); err != nil {
					return err
				}
			}
			round[name] = result{rps: mean(bares[name])}
		}
		perRound[r] = round
	}

	fmt.Printf("\n%-32s %10s  %s\n", "requests/s", "median", "per round")
	for _, p := range phases {
		var vs []float64
		for _, round := range perRound {
			vs = append(vs, round[p.name].rps)
		}
		fmt.Printf("%-32s %10.0f  %s\n", p.description, median(vs), join(vs, 'f', 0))
	}
	fmt.Printf("\nEngine outcomes during the measured phases: stored %d, replay %d, conflict %d, store_error %d, lock_lost %d"+
		" (and %d requests canceled by wrk at the end of a phase)\n",
		seen[core.OutcomeStored].Load(), seen[core.OutcomeReplay].Load(), seen[core.OutcomeConflict].Load(),
		seen[core.OutcomeStoreError].Load(), seen[core.OutcomeLockLost].Load(), canceled.Load())
	if n := seen[core.OutcomeStoreError].Load() + seen[core.OutcomeLockLost].Load(); n > 0 {
		return fmt.Errorf("%d store errors or lost locks during the run (the first: %v)", n, firstErr.Load())
	}
	if len(others) == 0 {
		return nil
	}

	fmt.Printf("\n%-32s %10s  %-8s  %s\n", "ratio to its bare on either side", "median", "target", "per round")
	var below bool
	row := func(description string, ratios []float64, want float64) {
		m := median(ratios)
		target, verdict := "", ""
		if want > 0 {
			target = fmt.Sprintf(">= %.2fx", want)
			if math.Round(m*100)/100 < want { // as printed
				verdict, below = "  BELOW TARGET", true
			}
		}
		fmt.Printf("%-32s %9.2fx  %-8s  %s%s\n", description, m, target, join(ratios, 'f', 2), verdict)
	}
	ratio := func(round map[string]result, name string) float64 { return round[name].rps / round[name].bare }
	for _, p := range others {
		var ratios []float64
		if _, ok := baseOf[p.base()]; !ok {
			fmt.Printf("%-32s (no ratio: phase %s not run)\n", p.description, p.base())
			continue
		}
		for _, round := range perRound {
			ratios = append(ratios, ratio(round, p.name))
		}
		row(p.description, ratios, p.target)
	}
	// fiberidem against Fiber's own middleware: in each round, the ratio
	// of their two ratios to their bare runs.
	ran := func(name string) bool {
		i := slices.IndexFunc(others, func(p phase) bool { return p.name == name })
		if i < 0 {
			return false
		}
		_, ok := baseOf[others[i].base()]
		return ok
	}
	for _, v := range versus {
		if !ran(v.phase) || !ran(v.other) {
			continue
		}
		var ratios []float64
		for _, round := range perRound {
			ratios = append(ratios, ratio(round, v.phase)/ratio(round, v.other))
		}
		row(v.description, ratios, v.target)
	}
	if len(commits) > 0 {
		fmt.Printf("\n%-32s %10s  %s\n", "commits per request", "median", "per run (pg_stat_database.xact_commit, read-only ones too)")
		for _, p := range phases {
			if w := commits[p.name]; len(w) > 0 {
				fmt.Printf("%-32s %10.2f  %s\n", p.description, median(w), join(w, 'f', 2))
			}
		}
		fmt.Printf("\n%-32s %10s  %s\n", "app CPU per request, µs", "median", "per run (this process: server, idem, pgx; not wrk)")
		for _, p := range phases {
			if c := cpu[p.name]; len(c) > 0 {
				fmt.Printf("%-32s %10.0f  %s\n", p.description, median(c), join(c, 'f', 0))
			}
		}
	}
	if below {
		fmt.Println("\n(some ratios below target: docs/performance.md has the figures of a 2-core machine and where the time goes)")
	}
	return nil
}

// A result is a phase's throughput in one round, and the mean throughput of
// the bare runs just before and after it.
type result struct{ rps, bare float64 }

// mean returns the mean of vs.
func mean(vs []float64) float64 {
	var sum float64
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

// median returns the median of vs.
func median(vs []float64) float64 {
	vs = slices.Sorted(slices.Values(vs))
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// join formats vs with strconv.FormatFloat, separated by spaces.
func join(vs []float64, format byte, prec int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.FormatFloat(v, format, prec, 64)
	}
	return strings.Join(s, " ")
}

var (
	rps      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	requests = regexp.MustCompile(`(\d+) requests in`)
	non2xx   = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
)

// cleanup deletes the run's keys, in pipelines of one UNLINK per key (a
// Cluster client splits them by slot).
func cleanup(c redis.UniversalClient, prefix string) {
	ctx := context.Background()
	pipe := c.Pipeline()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		pipe.Unlink(ctx, iter.Val())
		if pipe.Len() == 1000 {
			pipe.Exec(ctx)
		}
	}
	pipe.Exec(ctx)
}

// pgPoolSize is the pool_max_conns the PostgreSQL store gets when the URL
// sets none (pgxpool's default, the number of CPUs but at least 4, makes
// wrk's connections queue for the pool).
const pgPoolSize = "32"

// pgStores are the PostgreSQL stores of a run, in a database of its own
// (whose commits are the run's alone) with a table of orders.
type pgStores struct {
	pool   *pgxpool.Pool
	conn   *pgx.ConnConfig // of the database, for xactCommits
	lease  *pgstore.Store
	tx     *pgstore.TxStore
	orders string // the table's name, quoted
	close  func() // closes the stores and the pool, and drops the database
}

func postgresStores(pgURL string) (*pgStores, error) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgURL)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(pgURL, "pool_max_conns") {
		n, _ := strconv.Atoi(pgPoolSize)
		cfg.MaxConns = int32(n)
	}
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	db := "idemload_" + strings.ToLower(rand.Text())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		admin.Close(ctx)
		return nil, err
	}
	drop := func() {
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		admin.Close(ctx)
	}
	cfg.ConnConfig.Database = db
	cfg.ConnConfig.RuntimeParams["application_name"] = loadApp
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, err
	}
	pg := &pgStores{pool: pool, conn: cfg.ConnConfig.Copy(), orders: "orders"}
	pg.close = func() { pool.Close(); drop() }
	err = pgstore.Migrate(ctx, pool, nil)
	if err == nil {
		_, err = pool.Exec(ctx, "CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL, qty int NOT NULL)")
	}
	if err == nil {
		pg.lease, err = pgstore.New(pool, nil)
	}
	if err == nil {
		pg.tx, err = pgstore.NewTx(pool, nil)
	}
	if err != nil {
		pg.close()
		return nil, err
	}
	closePool := pg.close
	pg.close = func() { pg.tx.Close(); pg.lease.Close(); closePool() }
	return pg, nil
}

// insertHandler is the JSON handler that also inserts the order into table:
// through the request's transaction in the transactional mode, else in a
// transaction of its own.
func insertHandler(pool *pgxpool.Pool, table string) http.Handler {
	query := "INSERT INTO " + table + " (item, qty) VALUES ($1, $2) RETURNING id"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		db := pgstore.TxOr(r.Context(), pool)
		var id int64
		if err := db.QueryRow(r.Context(), query, o.Item, o.Qty).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		o.ID, o.Amount, o.Currency, o.Status = strconv.FormatInt(id, 10), 4200, "EUR", "created"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(o)
	})
}

// processCPU returns the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadApp is the application_name of the run's connections to PostgreSQL.
const loadApp = "idem-loadtest"

// xactCommits returns the database's pg_stat_database.xact_commit once the
// pool's connections have flushed their statistics (a backend flushes when
// it exits; one in use, at most once a second), and own, the commits of its
// own connection, which count from the next call on. It leaves the pool
// with all its connections open again.
func xactCommits(pool *pgxpool.Pool, conn *pgx.ConnConfig) (n, own int64, err error) {
	ctx := context.Background()
	pool.Reset()
	c, err := pgx.ConnectConfig(ctx, conn.Copy())
	if err != nil {
		return 0, 0, err
	}
	defer c.Close(ctx)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var left int
		own++
		err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()", loadApp).Scan(&left)
		if err != nil {
			return 0, 0, err
		}
		if left == 0 {
			break
		}
	}
	own++
	if err := c.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
		return 0, 0, err
	}
	// The pool's connections again, so that the next phase does not open
	// them all at once within its requests' store timeouts.
	held := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for range cap(held) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return 0, 0, err
		}
		held = append(held, c)
	}
	return n, own, nil
}

func redactURL(s string) string {
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			return s[:j+3] + "…" + s[i:]
		}
	}
	return s
}
