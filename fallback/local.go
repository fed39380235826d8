package fallback

import (
	"container/list"
	"math"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/floodgate-go/floodgate/tiers"
)

// localEntry is one bucket's local limiter and the share it was built for.
type localEntry struct {
	key   string
	limit tiers.Limit
	lim   *rate.Limiter
	burst int64
}

// localLimiters is a bounded LRU of x/time/rate limiters keyed by
// Bucket.Key. It is not safe for concurrent use; Store guards it with its
// mutex.
type localLimiters struct {
	capacity int
	replicas int
	ll       list.List // front = most recently used; values are *localEntry
	byKey    map[string]*list.Element
	evicted  uint64
}

func newLocalLimiters(capacity, replicas int) *localLimiters {
	l := &localLimiters{capacity: capacity, replicas: replicas, byKey: make(map[string]*list.Element)}
	l.ll.Init()
	return l
}

// share returns the local rate (events per second) and burst of limit for
// one of replicas instances: Rate ÷ Period ÷ replicas per second, and a
// burst of floor(capacity ÷ replicas), at least 1, where capacity is Burst
// for TokenBucket and GCRA and Rate for the window algorithms.
func share(limit tiers.Limit, replicas int) (rate.Limit, int64) {
	perSecond := float64(limit.Rate) / limit.Period.Seconds() / float64(replicas)
	burst := limit.Capacity() / int64(replicas)
	if burst < 1 {
		burst = 1
	}
	if burst > math.MaxInt32 {
		burst = math.MaxInt32
	}
	return rate.Limit(perSecond), burst
}

// get returns the limiter for key at limit, creating it full or adjusting it
// to a changed limit (keeping its consumption), and marks it most recently
// used. Creating an entry when the LRU is full evicts the least recently
// used one.
func (l *localLimiters) get(key string, limit tiers.Limit, now time.Time) *localEntry {
	if el, ok := l.byKey[key]; ok {
		l.ll.MoveToFront(el)
		e := el.Value.(*localEntry)
		if e.limit != limit {
			r, b := share(limit, l.replicas)
			e.lim.SetLimitAt(now, r)
			e.lim.SetBurstAt(now, int(b))
			e.limit, e.burst = limit, b
		}
		return e
	}
	if l.ll.Len() >= l.capacity {
		oldest := l.ll.Back()
		delete(l.byKey, oldest.Value.(*localEntry).key)
		l.ll.Remove(oldest)
		l.evicted++
	}
	r, b := share(limit, l.replicas)
	e := &localEntry{key: strings.Clone(key), limit: limit, lim: rate.NewLimiter(r, int(b)), burst: b}
	l.byKey[e.key] = l.ll.PushFront(e)
	return e
}

func (l *localLimiters) len() int { return l.ll.Len() }

// durationFor is how long the entry's limiter takes to gain tokens, rounded
// up to a whole microsecond like the stores' arithmetic.
func (e *localEntry) durationFor(tokens float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	perSecond := float64(e.lim.Limit())
	d := math.Ceil(tokens / perSecond * 1e6)
	if d > float64(math.MaxInt64/int64(time.Microsecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d) * time.Microsecond
}
