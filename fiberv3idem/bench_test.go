package fiberv3idem_test

import (
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	"github.com/valyala/fasthttp"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/fiberv3idem"
)

// The benchmarks drive the app in-process (app.Handler() on a reused
// fasthttp.RequestCtx), so that they measure the middleware, not the
// network: the bare handler, idem on the memory store, and Fiber v3's own
// middleware/idempotency on its memory storage, each for the replay of a
// stored key and for a first run (a fresh key per iteration).

var (
	benchRequest  = []byte(`{"item":"book","qty":2}`)
	benchResponse = []byte(`{"id":"ord_1","item":"book","qty":2}`)
)

func benchHandler(mw fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New()
	h := func(c fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		c.Set(fiber.HeaderLocation, "/orders/ord_1")
		return c.Status(fiber.StatusCreated).Send(benchResponse)
	}
	if mw == nil {
		app.Post("/orders/:id", h)
	} else {
		app.Post("/orders/:id", mw, h)
	}
	return app.Handler()
}

// benchKey writes i as a 36-character key (the length Fiber's middleware
// insists on) into buf, without allocating.
func benchKey(buf []byte, i int) []byte {
	buf = buf[:0]
	n := strconv.AppendInt(make([]byte, 0, 20), int64(i), 10) // small: on the stack
	for range 36 - len(n) {
		buf = append(buf, '0')
	}
	return append(buf, n...)
}

// run sends b.N requests: without a key, or with key 0 every time, or
// (fresh) with a key of their own.
func run(b *testing.B, h fasthttp.RequestHandler, withKey, fresh bool) {
	var ctx fasthttp.RequestCtx
	key := make([]byte, 0, 36)
	send := func(i int) {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(fiber.MethodPost)
		ctx.Request.SetRequestURI("/orders/7")
		ctx.Request.Header.SetContentType(fiber.MIMEApplicationJSON)
		if withKey {
			key = benchKey(key, i)
			ctx.Request.Header.SetBytesV("Idempotency-Key", key)
		}
		ctx.Request.SetBody(benchRequest)
		h(&ctx)
		if s := ctx.Response.StatusCode(); s != fiber.StatusCreated {
			b.Fatalf("status %d: %s", s, ctx.Response.Body())
		}
	}
	send(0) // store key 0 for the replays
	b.ReportAllocs()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		if fresh {
			send(i)
		} else {
			send(0)
		}
	}
}

// BenchmarkFiber compares, in the same run, the bare handler, fiberv3idem
// on the memory store, and Fiber v3's own middleware/idempotency on its
// default memory storage and lock, which does less: no fingerprint (a
// reused key with another body gets the first response), no scope, a
// process-local lock.
func BenchmarkFiber(b *testing.B) {
	idem := func(b *testing.B) fiber.Handler {
		return fiberv3idem.New(fiberv3idem.Config{Engine: idemtest.BenchEngine(b)})
	}
	fiberOwn := func() fiber.Handler {
		return idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key"})
	}
	b.Run("bare", func(b *testing.B) { run(b, benchHandler(nil), false, false) })
	b.Run("no-key", func(b *testing.B) { run(b, benchHandler(idem(b)), false, false) })
	b.Run("replay", func(b *testing.B) { run(b, benchHandler(idem(b)), true, false) })
	b.Run("first-run", func(b *testing.B) { run(b, benchHandler(idem(b)), true, true) })
	b.Run("fiber-idempotency-replay", func(b *testing.B) { run(b, benchHandler(fiberOwn()), true, false) })
	b.Run("fiber-idempotency-first-run", func(b *testing.B) { run(b, benchHandler(fiberOwn()), true, true) })
}
