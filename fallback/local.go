package fallback

import (
	"container/list"
	"math"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"golang.org/x/time/rate"
)

// localEntry is one bucket's local limiter and the share it was built for.
type localEntry struct {
	key   string
	limit quota.Limit
	n     int       // the instance count the share was built for
	used  time.Time // the last local decision
	lim   *rate.Limiter
	burst int64
}

// localLimiters is a bounded LRU of x/time/rate limiters keyed by
// Bucket.Key. It is not safe for concurrent use; Store guards it with its
// mutex.
type localLimiters struct {
	capacity int
	ll       list.List // front = most recently used; values are *localEntry
	byKey    map[string]*list.Element
	evicted  uint64
}

func newLocalLimiters(capacity int) *localLimiters {
	l := &localLimiters{capacity: capacity, byKey: make(map[string]*list.Element)}
	l.ll.Init()
	return l
}

// share returns the local rate (events per second) and burst of limit for
// one of n instances: Rate ÷ Period ÷ n per second, and a burst of
// floor(capacity ÷ n), at least 1, where capacity is Burst for TokenBucket
// and GCRA and Rate for the window algorithms.
func share(limit quota.Limit, n int) (rate.Limit, int64) {
	perSecond := float64(limit.Rate) / limit.Period.Seconds() / float64(n)
	burst := limit.Capacity() / int64(n)
	if burst < 1 {
		burst = 1
	}
	if burst > math.MaxInt32 {
		burst = math.MaxInt32
	}
	return rate.Limit(perSecond), burst
}

// get returns the limiter for key at limit, for one of n instances,
// creating it or adjusting it to a changed limit or instance count
// (keeping its consumption), and marks it most recently used. A new
// limiter starts from what the primary last said of the key, when known
// (seen: the remaining units and when), refilled at the key's rate since
// and divided among the n instances; else full. Creating an entry when the
// LRU is full evicts the least recently used one.
func (l *localLimiters) get(key string, limit quota.Limit, n int, now time.Time, seen func(string, time.Time) (int64, time.Time, bool), _ int64, take []quota.Bucket) *localEntry {
	if el, ok := l.byKey[key]; ok {
		l.ll.MoveToFront(el)
		e := el.Value.(*localEntry)
		if e.limit != limit || e.n != n {
			r, b := share(limit, n)
			e.lim.SetLimitAt(now, r)
			e.lim.SetBurstAt(now, int(b))
			e.limit, e.burst, e.n = limit, b, n
		}
		if rem, at, ok := seen(key, now); ok && at.After(e.used) {
			// The primary answered for the key since the limiter last
			// decided: it refilled meanwhile, the store's bucket maybe
			// not. Start again from what the store said.
			e.seed(rem, at, now)
		}
		e.used = now
		return e
	}
	for l.ll.Len() >= l.capacity {
		oldest := l.ll.Back()
		if inTake(oldest.Value.(*localEntry).key, take) {
			// The take being decided holds it: evicting it would lose
			// what the take reserves on it. The list holds one more
			// until a later get.
			break
		}
		delete(l.byKey, oldest.Value.(*localEntry).key)
		l.ll.Remove(oldest)
		l.evicted++
	}
	r, b := share(limit, n)
	e := &localEntry{key: strings.Clone(key), limit: limit, n: n, lim: rate.NewLimiter(r, int(b)), burst: b}
	if rem, at, ok := seen(key, now); ok {
		e.seed(rem, at, now)
	}
	e.used = now
	l.byKey[e.key] = l.ll.PushFront(e)
	return e
}

func (l *localLimiters) len() int { return l.ll.Len() }

// seed lowers the limiter's tokens to this instance's share of what the
// primary said was left at at (rem units), refilled since: the fleet's
// remaining divided among the instances. It never adds tokens.
func (e *localEntry) seed(rem int64, at, now time.Time) {
	elapsed := max(0, now.Sub(at).Seconds())
	fleet := math.Min(float64(e.limit.Capacity()), float64(rem)+elapsed*float64(e.limit.Rate)/e.limit.Period.Seconds())
	share := math.Floor(fleet / float64(e.n))
	if share == 0 && fleet >= 1 {
		share = 1 // a share is at least 1 while the fleet has a unit (as the burst is)
	}
	if excess := e.lim.TokensAt(now) - share; excess >= 1 {
		e.lim.ReserveN(now, int(excess))
	}
}

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

// inTake reports whether key is a bucket of take.
func inTake(key string, take []quota.Bucket) bool {
	for i := range take {
		if take[i].Key == key {
			return true
		}
	}
	return false
}
