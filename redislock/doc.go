// Package redislock is idem's Redis store: a core.Store that lets many API
// instances share one Redis (a single node, Sentinel or Cluster), so that a
// request's handler runs once whichever instance each duplicate reaches.
//
// NewClient turns one REDIS_URL into a client, and New makes the Store over
// it for core.Config.Store. Each operation is one Lua script, fenced by the
// lock's owner token: a replay costs one round trip, a first request two.
// The Store also implements core.Admin, core.Invalidator (a purge reaches
// every process's replay cache over Pub/Sub, one subscription per Store
// until Close), core.Checkpointer and core.Config.Quota (EnforcesQuota).
// Failures are returned wrapped ("redislock: <operation>: …") for the
// Engine's policy. Run Redis with maxmemory-policy noeviction.
//
// See Example; the key layout, scripts, failures, batching and URLs are in
// [docs/redis.md].
//
// [docs/redis.md]: https://github.com/idem-go/idem/blob/main/docs/redis.md
package redislock
