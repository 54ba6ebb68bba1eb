package core

import (
	"container/list"
	"encoding/binary"
	"sync"
	"time"
)

// Invalidator is implemented by stores that tell every process when a
// record goes before it expires (an admin purge), so that Config.ReplayCache
// drops its copy. New calls SetInvalidate; the store calls invalidate with
// the key of each purged record, from any process, this one included. The
// stores of this module keep the functions of every Engine made with them,
// for their life.
type Invalidator interface {
	SetInvalidate(invalidate func(key string))
}

// replayCache keeps completed records in the process, bounded by bytes,
// least recently used first out. Records are immutable until they expire,
// so a copy is good until then or until a purge (Invalidator).
type replayCache struct {
	max int64
	now func() time.Time

	mu    sync.Mutex
	size  int64
	gen   uint64 // drops so far: a record read before one may be purged
	items map[string]*list.Element
	lru   list.List // of *cached, most recent in front
}

type cached struct {
	key     string
	record  []byte
	expires time.Time
}

// cacheOverhead is what one entry costs beside its key and record.
const cacheOverhead = 128

func newReplayCache(maxBytes int64) *replayCache {
	return &replayCache{max: maxBytes, now: time.Now, items: make(map[string]*list.Element)}
}

// get returns the record of key if it is cached and not expired.
func (c *replayCache) get(key string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil
	}
	e := el.Value.(*cached)
	if !c.now().Before(e.expires) {
		c.remove(el)
		return nil
	}
	c.lru.MoveToFront(el)
	return e.record
}

// generation returns a mark to pass to put: a record read from the store
// after it is cached only if no key was dropped since (a purge may have
// raced the read).
func (c *replayCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put caches record under key until the record expires, unless a key was
// dropped since gen; a record too large for the cache, or already expired,
// is not kept.
func (c *replayCache) put(key string, record []byte, gen uint64) {
	expires, ok := recordExpiry(record)
	cost := int64(len(key)+len(record)) + cacheOverhead
	if !ok || cost > c.max || !c.now().Before(expires) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
	c.items[key] = c.lru.PushFront(&cached{key: key, record: record, expires: expires})
	c.size += cost
	for c.size > c.max {
		c.remove(c.lru.Back())
	}
}

// drop forgets key.
func (c *replayCache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
}

func (c *replayCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cached)
	delete(c.items, e.key)
	c.size -= int64(len(e.key)+len(e.record)) + cacheOverhead
}

// recordExpiry reads the expiry of an encoded record without decoding the
// rest (see Record.appendBinary for the layout).
func recordExpiry(b []byte) (time.Time, bool) {
	switch {
	case len(b) > 0 && b[0] == recordSealed: // its times come first
		b = b[1:]
	case len(b) < 2+32 || b[0] != recordVersion:
		return time.Time{}, false
	default:
		b = b[2+32:]
		if _, n := binary.Uvarint(b); n > 0 { // the code
			b = b[n:]
		} else {
			return time.Time{}, false
		}
	}
	for range 2 { // requested, completed
		_, n := binary.Varint(b)
		if n <= 0 {
			return time.Time{}, false
		}
		b = b[n:]
	}
	exp, n := binary.Varint(b)
	if n <= 0 || exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, exp), true
}
