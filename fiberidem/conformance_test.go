package fiberidem_test

import (
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/fiberidem"
)

// serveFiber is the Fiber harness of the conformance suite: recover.New()
// outside, the middleware mounted on each route (so that c.Route().Path is
// the route template), the suite's net/http app through adaptor.HTTPHandler,
// served by app.Listener on a loopback listener.
func serveFiber(t *testing.T, eng *core.Engine, h http.Handler) string {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(recover.New(), func(c *fiber.Ctx) error {
		c.Set(idemtest.OuterHeader, c.Get(idemtest.OuterHeader))
		return c.Next()
	})
	mw := fiberidem.New(fiberidem.Config{Engine: eng})
	app.All("/orders", mw, adaptor.HTTPHandler(h))
	app.All("/orders/:id", mw, adaptor.HTTPHandler(h))
	return listen(t, app)
}

// listen serves app through app.Listener on 127.0.0.1:0 until the test
// ends.
func listen(t *testing.T, app *fiber.App) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &trackingListener{Listener: l}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln) }()
	t.Cleanup(func() {
		// fasthttp's Shutdown waits for every connection to go idle, and
		// one that a client dialled but never used never does: close them.
		ln.closeConns()
		if err := app.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("listener: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func TestHTTPConformance(t *testing.T) {
	idemtest.TestHTTP(t, serveFiber, nil)
}

// trackingListener remembers the connections it accepted, so that the
// test can close them when it ends.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close() //nolint:errcheck // closed already, most of them
	}
}

// TestHTTPConformanceTx runs the suite in the transactional mode's shape
// (Buffered flights), on idemtest's in-memory TxStore.
func TestHTTPConformanceTx(t *testing.T) {
	idemtest.TestHTTP(t, serveFiber, idemtest.NewTxStore)
}
