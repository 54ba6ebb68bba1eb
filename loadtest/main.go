// Command loadtest measures idem on the Redis store under load with wrk
// (make loadtest). It serves, on a loopback port of this process,
//
//	POST /orders  a small JSON handler behind core.Engine.Middleware on the Redis store
//	POST /bare    the same handler without the middleware: the baseline
//
// and runs wrk with idem.lua in four phases: bare, no key, a fresh key per
// request (first requests: lock, handler, store) and one fixed key
// (replays), in rounds of alternating order. It prints each phase's
// requests per second and its ratio to bare, measured in the same run.
//
//	go run ./loadtest -redis redis://127.0.0.1:6379/0 -duration 5s -connections 32
//
// Records are written under a key prefix of the run's own, with a TTL of
// two minutes, and deleted at the end.
package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

//go:embed idem.lua
var script []byte

var body = []byte(`{"id":"ord_1","item":"book","qty":2}`)

func main() {
	defURL := os.Getenv("REDIS_URL")
	if defURL == "" {
		defURL = "redis://127.0.0.1:6379/0"
	}
	redisURL := flag.String("redis", defURL, "Redis URL (default $REDIS_URL)")
	duration := flag.Duration("duration", 5*time.Second, "length of each wrk phase")
	connections := flag.Int("connections", 32, "wrk connections")
	threads := flag.Int("threads", 1, "wrk threads")
	rounds := flag.Int("rounds", 2, "rounds of the four phases")
	autopipeline := flag.Bool("autopipeline", false, "run the store on go-redis's (experimental) AutoPipeline of a single-node client")
	cpuprofile := flag.String("cpuprofile", "", "write the server's CPU profile over the whole run to this file")
	flag.Parse()
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
	if err := run(*redisURL, *duration, *connections, *threads, *rounds, *autopipeline); err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

type outcomes [core.OutcomeLockLost + 1]atomic.Int64

func run(redisURL string, duration time.Duration, connections, threads, rounds int, autopipeline bool) error {
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
	prefix := "idemload:" + rand.Text()
	defer cleanup(client, prefix)

	var (
		seen     outcomes
		canceled atomic.Int64
		scripter redis.Scripter = client
	)
	if autopipeline {
		c, ok := client.(*redis.Client)
		if !ok {
			return errors.New("-autopipeline needs a single-node redis:// URL")
		}
		ap, err := c.AutoPipeline()
		if err != nil {
			return err
		}
		defer ap.Close()
		scripter = ap
	}
	eng, err := core.New(core.Config{
		Store:       redislock.New(scripter, &redislock.Options{Prefix: prefix}),
		ResponseTTL: 2 * time.Minute,
		Observer: func(ev core.Event) {
			if ev.Outcome == core.OutcomeStoreError && errors.Is(ev.Err, context.Canceled) {
				canceled.Add(1) // wrk closed the connection at the end of a phase
				return
			}
			seen[ev.Outcome].Add(1)
		},
	})
	if err != nil {
		return err
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(handler))
	mux.Handle("POST /bare", handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	// The fixed key's first request, so that its phase is replays only.
	req, _ := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(`{"item":"book","qty":2}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", prefix+"-fixed")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()

	var phase int
	wrkPhase := func(mode string, d time.Duration) (float64, error) {
		phase++ // fresh keys of their own in every phase
		out, err := exec.Command(wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(connections),
			"-d", d.String(), "-s", scriptPath, base, "--", mode, prefix+"-"+strconv.Itoa(phase), prefix+"-fixed").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("wrk %s: %v\n%s", mode, err, out)
		}
		if m := non2xx.FindSubmatch(out); m != nil {
			return 0, fmt.Errorf("wrk %s: %s non-2xx responses\n%s", mode, m[1], out)
		}
		m := rps.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("wrk %s: no Requests/sec in\n%s", mode, out)
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}

	fmt.Printf("idem load test: Redis %s (autopipeline %v), wrk -t%d -c%d, %v per phase, %d rounds, GOMAXPROCS %d\n",
		redactURL(redisURL), autopipeline, threads, connections, duration, rounds, runtime.GOMAXPROCS(0))
	for _, mode := range []string{"bare", "none", "fresh", "fixed"} { // warm-up
		if _, err := wrkPhase(mode, time.Second); err != nil {
			return err
		}
	}
	for i := range seen {
		seen[i].Store(0)
	}
	canceled.Store(0)
	phases := []string{"bare", "none", "fresh", "fixed"}
	results := map[string][]float64{}
	for r := range rounds {
		order := phases
		if r%2 == 1 {
			order = []string{"fixed", "fresh", "none", "bare"}
		}
		for _, mode := range order {
			v, err := wrkPhase(mode, duration)
			if err != nil {
				return err
			}
			results[mode] = append(results[mode], v)
		}
	}

	mean := func(vs []float64) float64 {
		var s float64
		for _, v := range vs {
			s += v
		}
		return s / float64(len(vs))
	}
	bare := mean(results["bare"])
	fmt.Printf("\n%-28s %12s  %s\n", "phase", "req/s", "per round")
	names := map[string]string{
		"bare":  "bare handler (no middleware)",
		"none":  "no key",
		"fresh": "first request (fresh key)",
		"fixed": "replay (fixed key)",
	}
	for _, mode := range phases {
		var per []string
		for _, v := range results[mode] {
			per = append(per, strconv.FormatFloat(v, 'f', 0, 64))
		}
		fmt.Printf("%-28s %12.0f  %s\n", names[mode], mean(results[mode]), strings.Join(per, " "))
	}
	fmt.Printf("\nEngine outcomes during the measured phases: stored %d, replay %d, conflict %d, store_error %d, lock_lost %d"+
		" (and %d requests canceled by wrk at the end of a phase)\n",
		seen[core.OutcomeStored].Load(), seen[core.OutcomeReplay].Load(), seen[core.OutcomeConflict].Load(),
		seen[core.OutcomeStoreError].Load(), seen[core.OutcomeLockLost].Load(), canceled.Load())
	fmt.Println("\nratios to the bare handler, same run:")
	var failed bool
	for _, r := range []struct {
		mode, what string
		target     float64
	}{
		{"fresh", "first requests", 0.30},
		{"fixed", "replays", 0.45},
		{"none", "requests without a key", 0.95},
	} {
		ratio := mean(results[r.mode]) / bare
		verdict := "ok"
		if ratio < r.target {
			verdict, failed = "BELOW TARGET", true
		}
		fmt.Printf("  %-24s %.2fx  (target >= %.2fx) %s\n", r.what, ratio, r.target, verdict)
	}
	if n := seen[core.OutcomeStoreError].Load() + seen[core.OutcomeLockLost].Load(); n > 0 {
		return fmt.Errorf("%d store errors or lost locks during the run", n)
	}
	if failed {
		fmt.Println("\n(some ratios below target; on a shared or busy machine, rerun)")
	}
	return nil
}

var (
	rps    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	non2xx = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
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

func redactURL(s string) string {
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			return s[:j+3] + "…" + s[i:]
		}
	}
	return s
}
