// Package redislock is the Redis store of idem: a core.Store that lets many
// API instances share one Redis (a single node, Sentinel or Cluster), so
// that a request's handler runs once whichever instance each duplicate
// reaches.
//
//	client, err := redislock.NewClient(os.Getenv("REDIS_URL"))
//	if err != nil { … }
//	defer client.Close()
//	eng, err := core.New(core.Config{Store: redislock.New(client, nil)})
//
// Each request has two keys, <prefix>:{<id>} (the record) and
// <prefix>-lock:{<id>} (the owner token of the running request), where
// <id> is the Engine's hash of scope and key and a Cluster hash tag. Each
// operation is one Lua script: a replay costs one round trip, a first
// request two, a key in flight one; completion, release and refresh are
// fenced by the token. Concurrent requests share round trips: scripts that
// come while two batches are on their way to a node go out together as one
// pipeline (Options.DisableBatching turns that off).
//
// The Store implements core.Admin (idemctl and the admin handler; Purge
// holds the key's lock with bsm/redislock) and core.Invalidator (purges
// reach every process's Config.ReplayCache over Pub/Sub). Failures are
// returned wrapped ("redislock: <operation>: …") for the Engine's policy.
// Run Redis with maxmemory-policy noeviction.
//
// NewClient turns one URL into the right client: redis:// and rediss://
// (TLS), unix://, redis+cluster:// and redis+sentinel:// (and their rediss+
// forms), with go-redis's query options.
//
// The reasoning (scripts, why not bsm/redislock's Obtain, failures, what
// "exactly once" rests on, batching) is in docs/redis.md.
package redislock
