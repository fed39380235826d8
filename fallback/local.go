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
// and divided among the n instances, less what this instance admitted
// locally and has not charged to the store yet (owed); else from the
// capacity divided among them. Creating an entry when the LRU is full
// evicts the least recently used one.
func (l *localLimiters) get(key string, limit quota.Limit, n int, now time.Time, seen func(string, time.Time) (int64, time.Time, bool), owed int64, take []quota.Bucket) *localEntry {
	if el, ok := l.byKey[key]; ok {
		l.ll.MoveToFront(el)
		e := el.Value.(*localEntry)
		if e.limit != limit || e.n != n {
			// What the share spent stays spent (quota.Algorithm, "Limit
			// changes"): x/time/rate keeps a limiter's tokens across
			// SetBurst, so they move by the change of the local burst.
			r, b := share(limit, n)
			tokens := e.lim.TokensAt(now) + float64(b-e.burst)
			e.limit, e.burst, e.n = limit, b, n
			e.lim.SetLimitAt(now, r)
			e.setTokens(tokens, now)
		}
		if rem, at, ok := seen(key, now); ok && at.After(e.used) {
			// The primary answered for the key since the limiter last
			// decided: start again from what the store said.
			e.seed(rem, at, now, owed)
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
		e.seed(rem, at, now, owed)
	} else {
		e.seed(limit.Capacity(), now, now, owed)
	}
	e.used = now
	l.byKey[e.key] = l.ll.PushFront(e)
	return e
}

func (l *localLimiters) len() int { return l.ll.Len() }

// seed sets the limiter's tokens to this instance's share of what the
// primary said was left at at (rem units), refilled at the key's rate
// since and capped at the capacity, divided among the instances, less
// owed (units this instance admitted locally that the store has not been
// charged): the fleet's remaining divided among the instances, as package
// tiers/localfirst's async shares are. The share is not rounded, so n
// instances seeded from one answer hold together exactly what the store
// had; the tokens never exceed the local burst.
func (e *localEntry) seed(rem int64, at, now time.Time, owed int64) {
	elapsed := max(0, now.Sub(at).Seconds())
	fleet := math.Min(float64(e.limit.Capacity()), float64(rem)+elapsed*float64(e.limit.Rate)/e.limit.Period.Seconds())
	e.setTokens(fleet/float64(e.n)-float64(owed), now)
}

// setTokens replaces the limiter by one of the same rate and burst that
// holds tokens at now (capped at the burst). x/time/rate sets tokens only
// through reservations, of whole units: a limiter emptied at
// now − tokens ÷ rate holds exactly tokens at now; a debt (tokens below
// 0) is booked in whole units, rounded up.
func (e *localEntry) setTokens(tokens float64, now time.Time) {
	r, b := e.lim.Limit(), int(e.burst)
	lim := rate.NewLimiter(r, b)
	switch {
	case tokens >= float64(b):
		lim.ReserveN(now, 0) // full at now
	case tokens >= 0 && r > 0:
		lim.ReserveN(now.Add(-time.Duration(math.Ceil(tokens/float64(r)*float64(time.Second)))), b)
	default:
		lim.ReserveN(now, b)
		for d := int64(math.Ceil(-tokens)); d > 0; {
			k := min(d, int64(b))
			lim.ReserveN(now, int(k))
			d -= k
		}
	}
	e.lim = lim
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
