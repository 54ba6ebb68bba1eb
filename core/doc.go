// Package core is the framework-agnostic engine of idem: it makes retried
// mutations safe with an idempotency key, a lock and a stored response,
// over HTTP, gRPC, or for message consumers.
//
// The first request with a key runs the handler once and its response is
// stored; a later request with the same key, in the same scope, gets that
// response back with "X-Idempotency-Replay: true" and the handler does not
// run. A duplicate while the first runs gets 409 with Retry-After (or waits,
// Config.Wait); the same key with another request gets 422. Errors are
// RFC 9457 problem details. Every case: [docs/contract.md].
//
//	eng, err := core.New(core.Config{}) // the memory store: one instance; redislock or pgstore for many
//	if err != nil {
//		return err
//	}
//	mux.Handle("POST /orders", eng.Middleware(createOrder))
//
// # Who uses what
//
// App authors: Config, New, Engine.Middleware (net/http; the ginidem,
// echoidem, echov5idem, fiberidem, fiberv3idem and grpcidem modules adapt
// the same Engine), the stores (MemoryStore, NewTiered), SlogObserver, Event
// and InfoFromContext; Do, Step and DerivedKey for work that calls other
// services ([docs/steps.md]); Config.Quota to bound each scope's keys;
// Config.Sealer (package seal) to encrypt records.
//
// Transports other than HTTP: Engine.Key reads a key, Engine.Acquire runs
// the lease protocol for a Call, and Lease.Complete or Lease.Release ends
// it; Engine.Once wraps it for event consumers. HTTP framework adapters:
// Request, Engine.Keyed, Engine.Begin, Flight and Response.
//
// # Stores
//
// A Store has four methods (Acquire, Complete, Release, Refresh) over opaque
// keys and encoded records, and optional capabilities (Waiter, Admin,
// Invalidator, Checkpointer, TxStore, quotas: QuotaFromContext); package
// idemtest holds the conformance suites every store runs. MemoryStore is
// the default and serves one instance; redislock and pgstore serve many,
// and NewTiered puts one in front of the other.
//
// See Example; the reasons behind the design are in [docs/design.md].
//
// [docs/contract.md]: https://github.com/idem-go/idem/blob/main/docs/contract.md
// [docs/steps.md]: https://github.com/idem-go/idem/blob/main/docs/steps.md
// [docs/design.md]: https://github.com/idem-go/idem/blob/main/docs/design.md
package core
