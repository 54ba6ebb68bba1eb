// Package core is the framework-agnostic engine of idem: it makes retried
// mutations safe with an idempotency key, a lock and a stored response:
// over HTTP, gRPC, or for message consumers.
//
// The first request with a key runs the handler once and its response is
// stored; every later request with the same key (in the same scope) gets that
// response back, marked with "X-Idempotency-Replay: true", without running
// the handler. A duplicate that arrives while the first is still running gets
// 409 with Retry-After, or, with Config.Wait, waits for the first to finish.
// The same key with a different request (method, path, query, body media
// type, Content-Encoding, canonical body, critical headers) gets 422.
// Errors are RFC 9457 problem details.
//
// An Engine (New) holds the configuration and a Store. Engine.Middleware is
// the net/http middleware; the ginidem, echoidem, echov5idem, fiberidem and
// fiberv3idem modules adapt the same Engine to Gin, Echo v4 and v5, Fiber v2
// and v3, grpcidem to gRPC, and Engine.Once to event consumers.
//
// # Who uses what
//
// App authors: Config, New, Engine.Middleware, the stores (MemoryStore,
// NewTiered), the key validators (ValidateUUIDv4, ...), SlogObserver, Event
// and InfoFromContext.
//
// Transports other than HTTP (gRPC, message consumers) use the neutral
// layer in lease.go: Engine.Key reads a key, Engine.Acquire runs the lease
// protocol for a Call (run once per scope and key, replay the stored Record,
// refuse a reused key or one in flight), and Lease.Complete or Lease.Release
// ends it; Engine.Once wraps it for event consumers.
//
// HTTP framework adapters use adapter.go: Request, Engine.Keyed,
// Engine.Begin, Flight, CaptureWriter, BodyReader and Response. Store
// authors implement Store (store.go), optionally Waiter, Admin, Notifier and
// Invalidator, and run idemtest's suites. The reasons behind the design are
// in docs/design.md.
//
// # Stores
//
// A Store has four methods (Acquire, Complete, Release, Refresh) over opaque
// keys and encoded records. MemoryStore is the default and serves one
// instance; the redislock and pgstore packages serve many, and NewTiered puts
// one in front of the other. The idemtest package holds the conformance
// suites every store runs.
package core
