package redisstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// defaultDenialCacheSize is the over-limit cache's capacity unless
// WithDenialCache says otherwise.
const defaultDenialCacheSize = 10_000

// cacheKey identifies a cached denial: the bucket's key and its limit, so a
// changed limit never matches a denial decided under the old one.
type cacheKey struct {
	key string
	lim quota.Limit
}

type cacheEntry struct {
	until     time.Time // the denial holds while now < until
	resetAt   time.Time
	cost      int64 // the cost that was denied; a smaller one may pass
	remaining int64
	gen       uint64 // the cache's gen when the take was sent
}

// denialCache remembers buckets that denied, until their retry-after.
type denialCache struct {
	max  int
	hits atomic.Int64
	// gen counts the settlements and reports that gave units back (and
	// dropped denials): a denial decided before one of them, recorded
	// after, may already be lifted, so it is not recorded.
	gen atomic.Uint64

	mu sync.Mutex
	m  map[cacheKey]cacheEntry
}

func newDenialCache(max int) *denialCache {
	return &denialCache{max: max, m: make(map[cacheKey]cacheEntry)}
}

func (d *denialCache) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// answer fills res and reports true when a bucket of the take with
// CacheDenials set is still denied for at least the cost it asks. The
// denied bucket is reported with its cached numbers; the other buckets,
// not consulted, are reported Allowed with Remaining = Limit (unknown) and
// Source = SourceCache. Nothing is charged.
func (d *denialCache) answer(now time.Time, buckets []quota.Bucket, res []quota.Result) bool {
	hit := -1
	var e cacheEntry
	d.mu.Lock()
	for i := range buckets {
		b := &buckets[i]
		if !b.CacheDenials {
			continue
		}
		k := cacheKey{key: b.Key, lim: b.Limit}
		ce, ok := d.m[k]
		if !ok {
			continue
		}
		if !now.Before(ce.until) {
			delete(d.m, k)
			continue
		}
		// A bucket that may wait is still denied only while its units
		// are further away than it may wait.
		if cachedCost(b) >= ce.cost && ce.until.Sub(now) > b.MaxWait {
			hit, e = i, ce
			break
		}
	}
	d.mu.Unlock()
	if hit < 0 {
		return false
	}
	d.hits.Add(1)
	for i := range buckets {
		capacity := buckets[i].Limit.Capacity()
		if i == hit {
			reset := e.resetAt.Sub(now)
			if reset < 0 {
				reset = 0
			}
			res[i] = quota.Result{
				Allowed:    false,
				Limit:      capacity,
				Remaining:  e.remaining,
				Reset:      reset,
				RetryAfter: e.until.Sub(now),
				Source:     floodgate.SourceCache,
			}
			continue
		}
		res[i] = quota.Result{Allowed: true, Limit: capacity, Remaining: capacity, Source: floodgate.SourceCache}
	}
	return true
}

// record caches every denying bucket of a take that has CacheDenials set
// and a finite, positive retry-after. sent is when the take was sent
// (its retry-after counts from Redis's decision, later: a denial never
// outlives it) and gen the cache's gen then (see gen).
func (d *denialCache) record(sent time.Time, gen uint64, buckets []quota.Bucket, res []quota.Result) {
	now := sent
	if d.gen.Load() != gen {
		return
	}
	for i := range buckets {
		b := &buckets[i]
		r := &res[i]
		if !b.CacheDenials || r.Allowed || r.RetryAfter <= 0 {
			continue
		}
		e := cacheEntry{until: now.Add(r.RetryAfter), resetAt: now.Add(r.Reset), cost: cachedCost(b), remaining: r.Remaining, gen: gen}
		d.put(cacheKey{key: b.Key, lim: b.Limit}, e, now)
	}
}

// cachedCost is the cost a denial of b is cached for, and a cached denial
// is compared with: b's Cost, and for a partial grant (AtMost) the one
// unit it needs at least (its denial means not even one was there; a
// bucket denied a larger cost may still grant fewer units).
func cachedCost(b *quota.Bucket) int64 {
	if b.AtMost {
		return min(b.Cost, 1)
	}
	return b.Cost
}

// evictSample is how many denials a full cache looks at to make room.
const evictSample = 16

// put records a denial. A full cache makes room among evictSample of its
// denials (a map's iteration starts at a random place): those that ended,
// or else the one that ends first. A bounded look keeps a flood of new
// over-limit keys from costing a scan of the cache each, under the lock
// every cached take reads through: 110 µs a denial at 10 000 denials in
// force (BenchmarkDenialCachePutFull).
func (d *denialCache) put(k cacheKey, e cacheEntry, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen.Load() != e.gen {
		return // units were given back since the take was sent
	}
	if _, ok := d.m[k]; !ok && len(d.m) >= d.max {
		var (
			first   cacheKey
			firstAt time.Time
			n       int
			ended   bool
		)
		for ok, ce := range d.m {
			if n++; n > evictSample {
				break
			}
			switch {
			case !now.Before(ce.until):
				delete(d.m, ok)
				ended = true
			case n == 1 || ce.until.Before(firstAt):
				first, firstAt = ok, ce.until
			}
		}
		if !ended {
			delete(d.m, first)
		}
	}
	d.m[k] = e
}
