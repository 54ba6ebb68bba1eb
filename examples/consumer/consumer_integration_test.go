//go:build integration

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// TestConsumerKilled publishes 1000 events three times each to a stream of
// its own, runs three consumers and SIGKILLs them at random instants,
// starting each again, until the stream is drained: with the inbox every
// account's balance is exactly the sum of its distinct events. The same run
// with -generic (core.Engine.Once, the mark in Redis) reports how many
// events it applied twice.
func TestConsumerKilled(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "consumer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Run("inbox", func(t *testing.T) {
		doubled, kills := runKilled(t, bin)
		if doubled != 0 {
			t.Fatalf("%d events applied twice through the inbox", doubled)
		}
		t.Logf("inbox: %d kills, every balance exact, no event applied twice", kills)
	})
	t.Run("generic", func(t *testing.T) {
		doubled, kills := runKilled(t, bin, "-generic", "-lock-ttl", "1s")
		t.Logf("generic (Engine.Once, the mark in Redis): %d kills, %d events applied twice", kills, doubled)
	})
}

const (
	events   = 1000
	copies   = 3
	accounts = 17
)

// runKilled runs the consumers with flags until the stream is drained, and
// returns the number of events applied more than once and of kills. In
// inbox mode (no flags) it checks every balance exactly.
func runKilled(t *testing.T, bin string, flags ...string) (doubled, kills int) {
	ctx := context.Background()
	rdb, addr := testRedis(t)
	run := strings.ToLower(rand.Text())
	stream, prefix := "idemtest:consumer:"+run, "idemtest:"+run
	t.Cleanup(func() {
		rdb.Del(ctx, stream)
		var keys []string
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	dbURL, conn := schema(t)

	// The events, each published three times, in a random order.
	want := map[string]int64{}
	var entries []map[string]any
	for i := range events {
		account := "acct-" + strconv.Itoa(i%accounts)
		amount := int64(mrand.IntN(1000) + 1)
		want[account] += amount
		for range copies {
			entries = append(entries, map[string]any{"id": "ev-" + strconv.Itoa(i), "account": account,
				"amount": strconv.FormatInt(amount, 10), "delay_ms": strconv.Itoa(mrand.IntN(3))})
		}
	}
	mrand.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	pipe := rdb.Pipeline()
	for _, e := range entries {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: e})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	env := []string{"REDIS_URL=redis://" + addr + "/0", "DATABASE_URL=" + dbURL, "STREAM=" + stream,
		"GROUP=ledger", "CLAIM_AFTER=300ms"}
	args := append(flags, "-prefix", prefix)
	procs := make([]*consumer, 3)
	gen := 0
	startOne := func(i int) {
		gen++
		procs[i] = startConsumer(t, bin, args, append(env, fmt.Sprintf("CONSUMER=c%d-%d", i, gen))...)
	}
	for i := range procs {
		startOne(i)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.stop()
		}
	})

	drained := func() bool {
		groups, err := rdb.XInfoGroups(ctx, stream).Result()
		if err != nil || len(groups) != 1 {
			return false
		}
		last, err := rdb.XInfoStream(ctx, stream).Result()
		return err == nil && groups[0].Pending == 0 && groups[0].LastDeliveredID == last.LastGeneratedID
	}
	deadline := time.Now().Add(3 * time.Minute)
	for !drained() {
		if time.Now().After(deadline) {
			t.Fatalf("the stream was not drained in 3 minutes (%d kills)", kills)
		}
		time.Sleep(time.Duration(20+mrand.IntN(200)) * time.Millisecond)
		if kills < 40 && !drained() {
			i := mrand.IntN(len(procs))
			procs[i].kill()
			kills++
			startOne(i)
		}
	}
	for _, p := range procs {
		p.stop()
	}

	got := map[string]int64{}
	rows, err := conn.Query(ctx, "SELECT account, balance FROM accounts")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		var b int64
		rows.Scan(&a, &b)
		got[a] = b
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var applied, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT event_id) FROM ledger_entries").Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != events {
		t.Fatalf("%d distinct events applied, want %d", distinct, events)
	}
	if len(flags) == 0 {
		for a, w := range want {
			if got[a] != w {
				t.Errorf("%s: balance %d, want %d", a, got[a], w)
			}
		}
		var marks int
		conn.QueryRow(ctx, "SELECT count(*) FROM processed_events").Scan(&marks)
		if marks != events {
			t.Errorf("%d events marked in the inbox, want %d", marks, events)
		}
	}
	return applied - distinct, kills
}

// testRedis is a client of the Redis at $IDEM_REDIS_ADDR (127.0.0.1:6379),
// closed when the test ends, and its address.
func testRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	addr := os.Getenv("IDEM_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", addr, err)
	}
	return rdb, addr
}

// schema creates a schema of the test's own, dropped after it, and returns
// a DATABASE_URL whose connections use it, with a connection to it.
func schema(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	base := os.Getenv("IDEM_PG_URL")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	name := "idemtest_" + strings.ToLower(rand.Text())
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", base, err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("cleanup: DROP SCHEMA %s: %v", name, err)
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	url := base + sep + "search_path=" + name
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return url, conn
}

// randomText returns n texts of crypto/rand joined: about 10 kB for 400,
// which PostgreSQL cannot compress under btree's limit of 2704 bytes.
func randomText(n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(rand.Text())
	}
	return b.String()
}

// consumer is a running consumer process.
type consumer struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
	logs bytes.Buffer
}

func startConsumer(t *testing.T, bin string, args []string, env ...string) *consumer {
	t.Helper()
	c := &consumer{t: t, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.logs, &c.logs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.cmd.Wait(); close(c.done) }() //nolint:errcheck
	return c
}

// kill sends SIGKILL and waits for the process to end.
func (c *consumer) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck
	<-c.done
}

// stop sends SIGTERM, and SIGKILL after 10 s.
func (c *consumer) stop() {
	c.once.Do(func() {
		c.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			c.kill()
		}
		if c.t.Failed() {
			c.t.Logf("consumer log:\n%s", c.logs.String())
		}
	})
}

// TestConsumerDeadLetter: an event that PostgreSQL refuses for its data (a
// balance past bigint's range; an account too long for the primary key's
// index, SQLSTATE 54000), or a malformed one, goes to the dead-letter stream
// with its error and is acknowledged, once; the events around it apply.
func TestConsumerDeadLetter(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "consumer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx := context.Background()
	rdb, addr := testRedis(t)
	stream := "idemtest:consumer:" + strings.ToLower(rand.Text())
	dead := stream + ":dead"
	t.Cleanup(func() { rdb.Del(ctx, stream, dead) })
	dbURL, conn := schema(t)
	for _, e := range []map[string]any{
		{"id": "ev-1", "account": "acct", "amount": "1"},
		{"id": "ev-2", "account": "acct", "amount": "9223372036854775807"}, // 1 + this overflows
		{"id": "ev-3", "account": "acct", "amount": "2"},
		{"id": "ev-4", "account": randomText(400), "amount": "1"},
		{"id": "ev-5", "account": "acct", "amount": "1.5"}, // malformed
	} {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: e}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := startConsumer(t, bin, nil, "REDIS_URL=redis://"+addr+"/0", "DATABASE_URL="+dbURL, "STREAM="+stream,
		"GROUP=ledger", "CONSUMER=c1", "CLAIM_AFTER=200ms")
	t.Cleanup(c.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		groups, err := rdb.XInfoGroups(ctx, stream).Result()
		if err == nil && len(groups) == 1 && groups[0].Pending == 0 && groups[0].EntriesRead == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream was not drained in 30 s: %+v, %v", groups, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var balance int64
	var entries int
	if err := conn.QueryRow(ctx, "SELECT balance, (SELECT count(*) FROM ledger_entries) FROM accounts WHERE account = 'acct'").
		Scan(&balance, &entries); err != nil {
		t.Fatal(err)
	}
	if balance != 3 || entries != 2 {
		t.Errorf("balance %d, %d ledger entries; want 3, 2 (ev-1 and ev-3)", balance, entries)
	}
	letters, err := rdb.XRange(ctx, dead, "-", "+").Result()
	if err != nil || len(letters) != 3 || letters[0].Values["id"] != "ev-2" ||
		!strings.Contains(fmt.Sprint(letters[0].Values["error"]), "22003") ||
		letters[1].Values["id"] != "ev-4" || !strings.Contains(fmt.Sprint(letters[1].Values["error"]), "54000") ||
		letters[2].Values["id"] != "ev-5" || letters[2].Values["amount"] != "1.5" {
		t.Fatalf("dead letters: %d, %v; want ev-2 once, with SQLSTATE 22003, then ev-4, with 54000, then the malformed ev-5", len(letters), err)
	}
}
