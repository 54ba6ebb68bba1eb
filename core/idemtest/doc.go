// Package idemtest holds the conformance suites of idem, as exported test
// helpers in the manner of gin-contrib/sessions' tester package:
//
//   - TestStore checks a core.Store: locking, fencing, TTLs and concurrency.
//     Every store runs it: the memory store, the Redis store (on miniredis,
//     a real Redis and a Redis Cluster) and any store you write.
//   - TestLease checks the transport-neutral layer (Engine.Acquire, Lease,
//     Engine.Once) on a store: many goroutines, one key, one run.
//   - TestAdmin checks a core.Admin store: inspect, purge (refused in
//     flight, safe among concurrent requests), unlock, InFlight.
//   - TestQuota checks Config.Quota on a store: 200 concurrent new keys of
//     one scope, exactly the bound admitted, replays never refused.
//   - TestHTTP checks an HTTP integration, row by row of the HTTP contract,
//     through a real loopback server. The net/http middleware runs it, and
//     so does every framework adapter. On a core.TxStore it also checks
//     that a failed commit answers 503 and nothing of the handler's response
//     reached the client (on NewTxStore, an in-memory TxStore, otherwise).
//   - TestSmuggling, TestTruncatedBody and TestRefusedLargeBody check how
//     an HTTP integration reads a request body it refuses or that ends
//     short: nothing smuggled in a refused body runs, a cut body runs
//     nothing, and a client still sending a refused large body reads the
//     answer.
//   - NewTxStore returns a TxStore, a core.TxStore in memory whose commits
//     fail on demand, for an adapter's tests of Buffered flights without a
//     database.
//   - BenchEngine gives an adapter's benchmarks an Engine whose store never
//     fills up mid-benchmark.
//
// A store's test is then one call:
//
//	func TestMyStore(t *testing.T) {
//		idemtest.TestStore(t, func(t *testing.T) core.Store { return mystore.New(...) })
//	}
//
// Where a lock or a record must expire, the suites wait in real time for
// the store's server; FakeTime (a testing/synctest bubble) or Advance (a
// fake server's clock) make it instant.
package idemtest
