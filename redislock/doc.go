// Package redislock is the Redis store of idem: a core.Store that lets many
// API instances behind a load balancer share one Redis (a single node,
// Sentinel or Cluster), so that a request's handler runs exactly once
// whichever instance each duplicate reaches.
//
//	client, err := redislock.NewClient(os.Getenv("REDIS_URL"))
//	if err != nil { … }
//	defer client.Close()
//	eng, err := core.New(core.Config{Store: redislock.New(client, nil)})
//
// # Key layout
//
// The Engine hands the store a key that is already the SHA-256 (64 hex
// digits) of scope, client key and optionally route, so no client key can
// change the layout or reach another scope. Each request has two keys:
//
//	<prefix>:{<id>}        the record: the stored response (record format of core.Record)
//	<prefix>-lock:{<id>}   the lock: the owner token of the request running the handler
//
// The prefix is "idempotency" unless Options.Prefix says otherwise. The
// {<id>} part is a Redis Cluster hash tag: both keys of a request live in
// one slot, which is what lets one script touch both on a Cluster. Keys that
// would break the tag (empty, or holding a brace) are refused with
// ErrInvalidStoreKey; New panics on a prefix holding a brace.
//
// # Scripts and round trips
//
// Four Lua scripts (embedded .lua files) do the work, each in one round
// trip:
//
//	acquire.lua   GET the record; if there is none and no lock, SET the lock
//	              PX with a new token. Returns the record, 1 (locked) or 0
//	              (in flight).
//	complete.lua  if the lock still holds our token, or if there is neither
//	              a lock nor a record (our lock expired and nobody took the
//	              key): SET the record PX ttl and DEL the lock, atomically.
//	              Otherwise change nothing: core.ErrLockLost.
//	release.lua   if the lock still holds our token, DEL it (5xx, panic, hijack);
//	              no lock at all is 2: expired, or deleted by this very call
//	              whose reply was lost (the Store ran it again).
//	refresh.lua   if the lock still holds our token, PEXPIRE it (long handlers).
//
// go-redis retries a command whose reply was lost (a read timeout, EOF), so
// a script may run twice with the same arguments: acquire finding its own
// token in the lock, and complete finding its own record stored, answer as
// the first run did, rather than "in flight" (a lock nobody would release
// before it expires) or "lock lost"; refresh run twice just extends the TTL
// twice. release run twice finds no lock the second time: when the Store
// ran it again itself (below), that is its own deletion; after go-redis's
// own retry, it reports core.ErrLockLost: the lock is gone either way, and
// only the Observer sees the difference (core.OutcomeLockLost instead of
// core.OutcomeNotStored).
//
// So a replay costs exactly one round trip, an in-flight conflict one, a
// first request two (acquire before the handler, complete after it), plus
// one refresh every LockTTL/3 while a long handler runs; concurrent
// requests share them (see Batching). A request without a
// key costs none. The scripts run with EVALSHA; the first run of each
// script on a Redis node whose script cache lacks it costs one more round
// trip (NOSCRIPT, then EVAL, which also caches it), once per script per node
// and again after a SCRIPT FLUSH or a failover to a node that never ran it.
//
// Completion is fenced by the token: a request whose lock was taken over by
// a duplicate after it expired gets core.ErrLockLost from complete, release
// and refresh, and cannot overwrite the other request's record nor drop its
// lock. A lock that expired with nobody taking the key (refreshes failed
// during a Redis outage, a long pause of the process) still completes: the
// handler ran once, and its record keeps a retry from running it again.
//
// # Why not bsm/redislock's Obtain
//
// bsm/redislock is the usual Redis lock for go-redis, and this store keeps
// its conventions: the lock key holds nothing but an owner token (a random
// per-process prefix, the time in milliseconds and a counter: unique, and
// cheaper than a crypto/rand read on every request, replays included; the
// time is the lock's age for operators), released and refreshed by the
// same get-compare-del and get-compare-pexpire scripts. Its API cannot be
// used as such, though:
//
//   - Obtain locks one key: it cannot look at the response key in the same
//     script, so a first request would cost a GET plus an Obtain (three round
//     trips instead of two), and between the two a duplicate may complete
//     and drop its lock, so that Obtain succeeds and the handler runs twice.
//   - A Lock's Refresh and Release need a *Lock, which only Obtain creates:
//     the Store has a key and a token (the core.Store contract hands nothing
//     else between calls, possibly in another process), so it would have to
//     Obtain again to get one: an extra round trip.
//   - Obtain with Options.Token set, the one way to rebuild a Lock from a
//     token, re-takes the key with SET NX when the lock has expired: used as
//     a refresh it would let a request whose lock expired lock the key again
//     after a duplicate had completed it, and overwrite that record. That
//     breaks fencing.
//
// Hence the store's own scripts. Purge, an operator's exclusive section
// on a key rather than a request's, does use Obtain (see Operators).
//
// # Operators
//
// The Store implements core.Admin, for the idemctl command and the admin
// package's HTTP handler: Inspect and Unlock are one script each; Purge
// obtains the key's own lock key with bsm/redislock (core.ErrInFlight if a
// request holds it, so no request starts on the key while it is purged),
// deletes the record if it still holds that lock, and releases it; InFlight
// SCANs the lock keys (per master on a Cluster) and reads each lock's age
// from its token.
//
// # Waiting (Config.Wait)
//
// The Store does not implement core.Waiter: a request that waits for a
// duplicate in flight is served by the Engine polling Acquire with
// exponential backoff (10 ms doubling to 250 ms, bounded by Config.Wait),
// one round trip per poll. Polling works the same on a single node,
// Sentinel and Cluster, needs no connection held per waiting request (a
// pub/sub subscription would hold one, on Cluster one per shard or a
// sharded channel per key) and cannot miss a wake-up: a lock that expires
// without anyone releasing it publishes nothing, while a poll sees it. The
// cost is latency (up to one backoff step after the first request
// completes) and a few round trips per waiting request, and waiting is the
// rare path.
//
// # Failures
//
// Every Redis failure (connection refused, timeout, READONLY from a replica
// after a failover, a script error, a wrong type at a key, a batch that
// failed) is returned as an error wrapping go-redis's, prefixed
// "redislock: <operation>:"; a stored value that is not a record fails in
// the Engine with core.ErrCorruptRecord.
// The Engine then applies its store-error policy: fail-open (the default)
// runs the handler unprotected and reports core.OutcomeStoreError to the
// Observer; Config.FailClosed answers 503 with Retry-After. The Store holds
// no goroutines, and no state besides the client's connection pool and the
// scripts waiting for a batch, so protection resumes by itself as soon as
// Redis answers again.
//
// A timeout does not tell whether Redis ran the command. An acquire script
// that a stalled Redis runs after the client gave up takes the lock for a
// request that was already answered (503, or run unprotected): retries of
// that key get 409 until the lock expires (LockTTL, 5 min by default), as
// after a Complete that failed. Nothing is run twice meanwhile; a client
// that gives up on 409 sooner meets a key stuck for that long.
//
// While Redis is down, go-redis's defaults retry each command (max_retries
// 3, and 5 dial attempts 100 ms apart) before giving up, which delays the
// policy by a second or two per request. A Redis that stalls (a frozen
// process, a network that drops packets) holds each request for up to
// read_timeout times max_retries+1 before the policy applies: 12 s with
// go-redis's defaults (3 s, 3), which a black-box test of the examples saw
// as a 10 s Acquire; a request whose script waited for a batch (see
// Batching) adds its wait in the queue, at most pool_timeout (by default
// read_timeout plus a second, or 30 s without a read_timeout). Set
// read_timeout (and dial_timeout) in the URL to what the API can afford to
// wait, such as read_timeout=500ms.
//
// The Engine gives its lock refreshes a deadline (LockTTL/6), so that one
// stuck on a stalled connection leaves time for the next before the lock
// expires. go-redis honours a context's deadline only with
// ContextTimeoutEnabled, which NewClient sets: set it on a client of your
// own too, or a refresh waits out read_timeout, and with a LockTTL of a few
// seconds the lock can expire under a running handler (a fault test saw a
// refresh take 5 s against a 500 ms deadline, and a second instance run the
// handler).
//
// Connections that Redis closed while they sat in the pool (a restart, a
// failover, its timeout setting, a proxy's idle timeout) are found by
// go-redis's pool health check before a command is sent on them, over TCP
// and Unix sockets. go-redis does not check TLS connections: there each
// command spends its attempts (max_retries+1) on dead connections, as many
// in a row as the pool holds, and fails with EOF while Redis is up. The
// Store runs a script again when it fails so (EOF, a reset) and the pool
// held idle connections when that run began, up to 8 runs in all: with
// go-redis's defaults that gets a request past 28 dead connections, and
// concurrent requests drain the pool together (a server that closes new
// connections at once costs two runs, not eight). Past that, fail-open
// serves the request unprotected. Over TLS, set max_idle_time below any
// idle timeout between the API and Redis, keep the pool no larger than it
// needs to be, and use Config.FailClosed where running a request twice is
// worse than a 503 after a failover.
//
// # What "exactly once" rests on
//
// While Redis answers and keeps what it is told, a key's handler runs once:
// the lock is taken and the record read in one script, and a request that
// lost its lock can neither store nor release. A duplicate run remains
// possible when:
//
//   - the store fails before the handler and the Engine fails open (the
//     default; Config.FailClosed answers 503 instead);
//   - a handler outlives LockTTL while every refresh fails, so the lock
//     expires and a duplicate takes it (reported as core.OutcomeLockLost);
//   - storing the response fails after the handler ran: the lock is left
//     to expire, so retries get 409 for LockTTL, and then one runs the
//     handler again (reported as core.OutcomeStoreError);
//   - Redis loses a lock or a record: a failover to a replica that had not
//     received it yet (replication is asynchronous), a restart without
//     persistence, or eviction: every key of the Store has a TTL, so any
//     volatile-* or allkeys-* maxmemory-policy may evict them; use
//     noeviction on the Redis that holds them;
//   - the record has expired (ResponseTTL, or the Engine's TTL function).
//
// # Batching
//
// Requests that reach the Store at the same moment share round trips. A
// script goes out at once, alone, while fewer than two batches are on their
// way to its Redis node. Scripts that come while two are on their way wait
// in a queue for one of them to come back, then go out together as one
// pipeline (one write and one read for all of them) of up to 100 scripts
// and 1 MiB of arguments, sent by one of their callers in its own
// goroutine. So the Store starts no goroutine, never holds a script back to
// wait for more, and one request at a time sends exactly what it would
// without batching. In Redis each script still runs alone and atomically:
// batching changes how scripts travel, not what they do.
//
// That is what makes the Store cheap under load. On loopback a round trip
// costs the API process more than its own HTTP request does (a write that
// also wakes Redis, a read, a poller wake-up), and Redis its own read and
// write; a batch pays them once for all its scripts. In the load test of the
// README (32 connections, wrk, the API and Redis on two cores), batching
// raised first requests from 0.22–0.25x to 0.32–0.36x of the bare handler's
// throughput, and replays from 0.39–0.43x to 0.51–0.56x.
//
// The Store batches on a *redis.Client (one node, or the master of a
// failover client) and on a *redis.ClusterClient, where each master has
// batches of its own, so that a slow node holds up only the requests whose
// keys it holds (a batch still goes through the cluster client, which
// follows MOVED and ASK). On any other redis.Scripter, such as a
// *redis.Ring, each script goes alone. What batching changes:
//
//   - a go-redis hook sees a batch as one pipeline, with the context of the
//     caller that sends it: a tracing hook records the other requests'
//     scripts in that request's trace;
//   - a script waits in the queue for at most the client's PoolTimeout (as
//     it would wait for a pooled connection without batching: by default
//     ReadTimeout plus a second, or 30 s without a ReadTimeout) and its
//     context; then it is dropped, never runs, and fails with
//     redis.ErrPoolTimeout or the context's error;
//   - a batch goes out without cancellation and with the latest of its
//     scripts' deadlines (none if one has none), sent by the caller whose
//     deadline that is, and who waits for the reply even if its context is
//     canceled; each other caller stops waiting for the reply when its own
//     context ends, and its script may then run, as may a script sent alone
//     whose caller gave up (a reply already there is kept);
//   - scripts of a batch that Redis answers with NOSCRIPT (a node that never
//     ran them, a SCRIPT FLUSH, a failover) run again with EVAL, in one more
//     pipeline;
//   - a batch that fails on a dropped connection is retried whole by
//     go-redis, and each of its scripts is run again as described under
//     Failures: all four are safe to run twice;
//   - a batch whose go-redis hook panics fails: the panic reaches the caller
//     that sent it, and the others get an error saying that their scripts
//     may have run;
//   - a script that waits for a batch costs five more allocations (its
//     place in the queue, a channel, a timer), and a batch a few (the
//     pipeline, the context).
//
// Options.DisableBatching sends every script alone.
//
// go-redis's AutoPipeliner batches too, and the Store runs on it as on any
// redis.Scripter (without batching of its own). It is not needed: in the
// same load test it did about as well (replays 0.54–0.58x, first requests
// 0.31–0.33x), but it hands every command to a goroutine of its own and
// back (8 more allocations per replay), it does not honour a command's
// context once queued, so the Engine's deadlines on lock refreshes do not
// apply, and its API is experimental in go-redis v9.
//
// # URLs
//
// NewClient turns one REDIS_URL into the right client:
//
//	redis://[user:password@]host:port[/db][?option=value&…]
//	rediss://…                                      (TLS)
//	unix://[user:password@]/path/to/redis.sock[?db=N]
//	redis+cluster://host:port?addr=host2:port2&addr=host3:port3
//	rediss+cluster://…                              (TLS)
//	redis+sentinel://sentinel:26379[/db]?master_name=mymaster&addr=sentinel2:26379
//	rediss+sentinel://…                             (TLS)
//
// with go-redis's query options (redis.ParseURL, redis.ParseClusterURL,
// redis.ParseFailoverURL), such as protocol=2, pool_size, read_timeout.
package redislock
