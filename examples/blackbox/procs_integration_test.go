//go:build integration

package blackbox

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
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

// The store processes of the fault tests: a redis-server and a PostgreSQL
// cluster of each test's own, on free loopback ports, so that they can be
// killed, stalled and restarted without touching the shared ones.

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// redisProc is a redis-server without persistence.
type redisProc struct {
	t      *testing.T
	port   int
	dir    string
	client *redis.Client // the test's own, for PING and FLUSHALL

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  strings.Builder
}

// startRedis starts a redis-server; t.Cleanup kills it.
func startRedis(t *testing.T) *redisProc {
	t.Helper()
	r := &redisProc{t: t, port: freePort(t), dir: t.TempDir()}
	r.client = redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() {
		r.signal(syscall.SIGCONT)
		r.kill()
		r.client.Close()
		if t.Failed() {
			t.Logf("redis-server log:\n%s", r.logs())
		}
	})
	r.start()
	return r
}

func (r *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }
func (r *redisProc) url() string  { return "redis://" + r.addr() + "/0" }

func (r *redisProc) logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

// loggedAt returns the time of a redis-server log line
// ("32443:M 28 Nov 2026 21:09:48.949 * Ready to accept connections", in
// the machine's time zone), or read if it has none or is later than read.
func loggedAt(line string, read time.Time) time.Time {
	_, rest, ok := strings.Cut(line, ":")
	if !ok || len(rest) < 2 {
		return read
	}
	fields := strings.Fields(rest[2:]) // after the role letter: day, month, year, time
	if len(fields) < 4 {
		return read
	}
	at, err := time.ParseInLocation("2 Jan 2006 15:04:05.000", strings.Join(fields[:4], " "), time.Local)
	if err != nil || at.After(read) {
		return read
	}
	return at
}

// start runs redis-server on its port and returns when it is ready: the
// time of its "Ready to accept connections" line, from the line's own
// timestamp (Redis serves no command before it writes it), or when the
// line was read if that does not parse. The time the test reads the line
// can be late by as long as the machine is busy: requests Redis answered
// meanwhile would count as answered before it was ready.
func (r *redisProc) start() time.Time {
	r.t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--daemonize", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
	ready := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				select {
				case ready <- loggedAt(sc.Text(), time.Now()):
				default:
				}
			}
			r.mu.Lock()
			r.log.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
		}
		io.Copy(io.Discard, out) //nolint:errcheck
		cmd.Wait()               //nolint:errcheck
	}()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	select {
	case at := <-ready:
		return at
	case <-done:
		r.t.Fatalf("redis-server exited at start:\n%s", r.logs())
	case <-time.After(10 * time.Second):
		r.t.Fatalf("redis-server on %s not ready after 10s:\n%s", r.addr(), r.logs())
	}
	return time.Time{}
}

func (r *redisProc) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		r.cmd.Process.Signal(sig) //nolint:errcheck // it may have exited
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (r *redisProc) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill() //nolint:errcheck
	<-done
}

// firstPing returns when a PING from the test succeeds (Redis answers).
func (r *redisProc) firstPing() time.Time {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := r.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return time.Now()
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s does not answer PING: %v", r.addr(), err)
		}
		time.Sleep(time.Millisecond)
	}
}

// pgProc is a PostgreSQL cluster: initdb into a temporary directory owned
// by the postgres user (initdb and postgres refuse to run as root), pg_ctl
// to start and stop it.
type pgProc struct {
	t    *testing.T
	dir  string
	port int
}

// pgBin finds a PostgreSQL program on the PATH or in Debian's
// /usr/lib/postgresql/<version>/bin.
func pgBin(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name); len(m) > 0 {
		return m[len(m)-1]
	}
	t.Fatalf("%s not found: the fault tests need PostgreSQL's server programs", name)
	return ""
}

// asPostgres runs a PostgreSQL program as the postgres user when the test
// runs as root.
func asPostgres(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	bin := pgBin(t, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

// startPostgres runs initdb and starts the cluster; t.Cleanup stops and
// deletes it.
func startPostgres(t *testing.T) *pgProc {
	t.Helper()
	dir, err := os.MkdirTemp("", "idem-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := asPostgres(t, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust",
		"--no-sync", "--no-instructions").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p := &pgProc{t: t, dir: dir, port: freePort(t)}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *pgProc) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", p.port)
}

// start starts the cluster and returns when a connection of the test's
// succeeds (pg_ctl -w polls every 100 ms): the time of its log line "ready
// to accept connections", and of that connection.
func (p *pgProc) start() (ready, connected time.Time) {
	p.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60 -c log_timezone=UTC",
		p.port, p.dir)
	ctl := asPostgres(p.t, "pg_ctl", "-D", filepath.Join(p.dir, "data"), "-o", opts,
		"-l", filepath.Join(p.dir, "log"), "-w", "-t", "30", "start")
	var out strings.Builder
	ctl.Stdout, ctl.Stderr = &out, &out
	if err := ctl.Start(); err != nil {
		p.t.Fatalf("pg_ctl start: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- ctl.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		conn, err := pgx.Connect(ctx, p.url())
		cancel()
		if err == nil {
			connected := time.Now()
			conn.Close(context.Background())
			if err := <-exited; err != nil {
				p.t.Fatalf("pg_ctl start: %v\n%s", err, out.String())
			}
			return p.readyLogged(), connected
		}
		select {
		case err := <-exited:
			if err != nil {
				log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
				p.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out.String(), log)
			}
			exited <- nil // started: the next connection gets through
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("PostgreSQL on port %d: no connection after 30s: %v", p.port, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// readyLogged returns the time of the last "ready to accept connections"
// in the cluster's log (log_line_prefix's default starts with the time in
// milliseconds).
func (p *pgProc) readyLogged() time.Time {
	p.t.Helper()
	log, err := os.ReadFile(filepath.Join(p.dir, "log"))
	if err != nil {
		p.t.Fatal(err)
	}
	var at time.Time
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "ready to accept connections") && len(l) > 27 {
			if at, err = time.Parse("2006-01-02 15:04:05.000 MST", l[:27]); err != nil {
				p.t.Fatalf("PostgreSQL log line %q: %v", l, err)
			}
		}
	}
	if at.IsZero() {
		p.t.Fatalf("PostgreSQL logged no readiness:\n%s", log)
	}
	return at
}

// stop shuts the cluster down the fast way, as a restart does: every
// session ends with an error.
func (p *pgProc) stop() {
	asPostgres(p.t, "pg_ctl", "-D", filepath.Join(p.dir, "data"), "-m", "fast", "-w", "stop").Run() //nolint:errcheck
}
