// Package core is the framework-agnostic engine of idem: it makes retried
// HTTP mutations safe with an Idempotency-Key header, a lock and a stored
// response.
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
// the net/http middleware; the ginidem, echoidem and fiberidem modules adapt
// the same Engine to Gin, Echo and Fiber through Engine.Keyed (is there
// anything to do?), Engine.Begin and Flight.
//
// # Stores
//
// A Store has four methods (Acquire, Complete, Release, Refresh) over opaque
// keys and encoded records. MemoryStore is the default and serves one
// instance; the redislock package serves many. The idemtest package holds the
// conformance suite every store runs.
package core
