package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Defaults and bounds of the Store's options.
const (
	// DefaultMaxKeys is the key cap when WithMaxKeys is not given.
	DefaultMaxKeys = 1 << 20
	// DefaultShards is the number of shards when WithShards is not given.
	DefaultShards = 64
	// MaxShards is the largest value WithShards accepts.
	MaxShards = 1 << 16
	// evictSample is how many entries of a full shard are examined to choose
	// what to delete when a new key arrives.
	evictSample = 32
	// sweepSample is how many entries an insertion into a non-full shard
	// examines for expiry.
	sweepSample = 4
	// sweepGrace is how long after its expiry an entry is kept when the
	// shard is not full, in µs (10 s): a busy token bucket whose state
	// expires within milliseconds is reused in place instead of being
	// deleted and allocated again on its next request.
	sweepGrace = 10_000_000
	// minTTL is the least lifetime of token bucket and GCRA state, in µs.
	minTTL = 1000
	// stackBuckets is how many buckets a Take decides without allocating.
	stackBuckets = 6
)

// Option configures a Store; New reports every bad one.
type Option func(*config)

type config struct {
	clock   floodgate.Clock
	maxKeys int
	shards  int
	errs    []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("memstore: "+format, args...))
}

// WithClock sets the clock the Store reads time from (default
// floodgate.SystemClock()). Tests pass a *clock.Fake from testing/clock.
func WithClock(c floodgate.Clock) Option {
	return func(cfg *config) {
		if c == nil {
			cfg.fail("WithClock: clock is nil")
			return
		}
		cfg.clock = c
	}
}

// WithMaxKeys caps the number of buckets the Store keeps (default
// DefaultMaxKeys; at least 1). See the package doc for what happens when
// it is reached.
func WithMaxKeys(n int) Option {
	return func(cfg *config) {
		if n < 1 {
			cfg.fail("WithMaxKeys: key cap %d must be >= 1", n)
			return
		}
		cfg.maxKeys = n
	}
}

// WithShards sets the number of independently locked shards (default
// DefaultShards; 1 to MaxShards). It is lowered to the key cap when the
// cap is smaller, so every shard can hold at least one key.
func WithShards(n int) Option {
	return func(cfg *config) {
		if n < 1 || n > MaxShards {
			cfg.fail("WithShards: shard count %d must be in [1, %d]", n, MaxShards)
			return
		}
		cfg.shards = n
	}
}

// Store is the in-process quota.Store. It is safe for concurrent use. The
// zero value is not usable; call New.
type Store struct {
	clock  floodgate.Clock
	seed   maphash.Seed
	shards []shard

	// Report's records of calls (see report.go), swept of expired ones
	// at most once per quota.ReportRecordTTL.
	rmu       sync.Mutex
	recs      map[recKey]record
	recsSwept int64
}

var _ quota.Store = (*Store)(nil)

// shard is one lock's worth of buckets and their index.
type shard struct {
	mu  sync.Mutex
	t   table
	cap int
	_   [8]byte // with the fields above, one 64-byte cache line per shard
}

// entry is one bucket's state. Which fields mean what depends on alg:
// TokenBucket: f = tokens, ts = time of the last charge. GCRA: f = TAT,
// in µs since quota.GCRAEpoch. SlidingWindowCounter: win, curr, prev.
// FixedWindow: win, curr (= count). SlidingWindowLog: log.
type entry struct {
	key     string
	expires int64 // µs; the state is absent at now >= expires
	alg     quota.Algorithm
	h       uint64
	f       float64
	ts      int64
	win     int64
	curr    int64
	prev    int64
	log     *ring
}

// Entries for short keys carry the key's bytes in the same allocation,
// so comparing the key touches no other cache line.
type (
	entryKey32 struct {
		entry
		kb [32]byte
	}
	entryKey64 struct {
		entry
		kb [64]byte
	}
)

// newEntry returns an entry for key, holding its own copy of key: the
// caller's string may live in a reused buffer.
func newEntry(h uint64, key string) *entry {
	var e *entry
	switch n := len(key); {
	case n <= 32:
		x := new(entryKey32)
		copy(x.kb[:], key)
		e = &x.entry
		e.key = unsafe.String(&x.kb[0], n) // never written again
	case n <= 64:
		x := new(entryKey64)
		copy(x.kb[:], key)
		e = &x.entry
		e.key = unsafe.String(&x.kb[0], n) // never written again
	default:
		e = &entry{key: strings.Clone(key)}
	}
	e.h = h
	return e
}

// hashMask is all ones except in tests that force hash collisions.
var hashMask = ^uint64(0)

// New returns a Store configured by opts, or an error naming every bad
// option.
func New(opts ...Option) (*Store, error) {
	cfg := config{clock: floodgate.SystemClock(), maxKeys: DefaultMaxKeys, shards: DefaultShards}
	for _, o := range opts {
		if o == nil {
			cfg.fail("nil Option")
			continue
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	if cfg.shards > cfg.maxKeys {
		cfg.shards = cfg.maxKeys
	}
	s := &Store{clock: cfg.clock, seed: maphash.MakeSeed(), shards: make([]shard, cfg.shards)}
	base, extra := cfg.maxKeys/cfg.shards, cfg.maxKeys%cfg.shards
	for i := range s.shards {
		s.shards[i].cap = base
		if i < extra {
			s.shards[i].cap++
		}
	}
	return s, nil
}

// pending is the decision on one bucket before it is committed.
type pending struct {
	e     *entry // existing entry, or nil
	fresh bool   // the state is absent (new, expired, or another algorithm)
	allow bool
	retry int64 // µs; -1 for never
	wait  int64 // µs: units booked ahead (Bucket.MaxWait), if the Take allows

	remNo, resetNo int64 // if the Take denies
	remCh, resetCh int64 // if the Take allows

	// state to commit when the Take allows
	f       float64
	ts      int64
	win     int64
	curr    int64
	prev    int64
	expires int64
	h       uint64
	homeH   uint64 // hash in h's home slot
	shard   uint32
}

// DecidesOnStoreError reports true: the store keeps its state in process
// and has no backend to lose, so a tiers.Limiter over it never needs a
// local fallback and does not warn about rules with on_store_error local.
func (s *Store) DecidesOnStoreError() bool { return true }

// Take implements quota.Store. See the package doc for what it decides.
// ctx is not consulted: an in-process take never waits for anything but
// the shard locks, held for the length of the arithmetic.
func (s *Store) Take(_ context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	if err := quota.ValidateTake(buckets, res); err != nil {
		return false, err
	}
	n := len(buckets)
	if n == 0 {
		return true, nil
	}
	var (
		pbuf [stackBuckets]pending
		lbuf [stackBuckets]uint32
		ps   []pending
		lock []uint32
	)
	if n <= stackBuckets {
		ps, lock = pbuf[:n], lbuf[:0]
	} else {
		ps, lock = make([]pending, n), make([]uint32, 0, n)
	}
	nsh := uint64(len(s.shards))
	for i := range buckets {
		h := maphash.String(s.seed, buckets[i].Key) & hashMask
		sh, _ := bits.Mul64(h, nsh)
		ps[i].shard, ps[i].h = uint32(sh), h
		lock = insertSorted(lock, uint32(sh))
	}
	for _, i := range lock {
		s.shards[i].mu.Lock()
	}
	// All lookups first, then all decisions. Each bucket's home slot is
	// read in a first pass and its entry checked in a second, so the
	// levels' cache misses overlap instead of queueing one behind the
	// other; a key not in its home slot takes the full probe.
	for i := range buckets {
		ps[i].e, ps[i].homeH = s.shards[ps[i].shard].t.home(ps[i].h)
	}
	for i := range buckets {
		p := &ps[i]
		if p.e == nil || p.homeH != p.h || p.e.key != buckets[i].Key {
			p.e = s.shards[p.shard].t.get(p.h, buckets[i].Key)
		}
	}
	now := s.clock.Now().UnixMicro()
	allowed := true
	for i := range buckets {
		p := &ps[i]
		b := &buckets[i]
		p.fresh = p.e == nil || p.e.alg != b.Limit.Algorithm || now >= p.e.expires
		decide(p, b, now)
		allowed = allowed && p.allow
	}
	if allowed {
		for i := range buckets {
			s.commit(&ps[i], &buckets[i], buckets, now)
		}
	}
	for k := len(lock) - 1; k >= 0; k-- {
		s.shards[lock[k]].mu.Unlock()
	}
	for i := range buckets {
		p := &ps[i]
		r := &res[i]
		*r = quota.Result{Allowed: p.allow, Limit: buckets[i].Limit.Capacity()}
		if allowed {
			r.Remaining, r.Reset, r.Wait = p.remCh, µs(p.resetCh), µs(p.wait)
		} else {
			r.Remaining, r.Reset = p.remNo, µs(p.resetNo)
		}
		switch {
		case p.allow:
		case p.retry < 0:
			r.RetryAfter = quota.Never
		default:
			r.RetryAfter = µs(p.retry)
		}
	}
	return allowed, nil
}

// insertSorted adds v to the ascending, duplicate-free list l, whose
// capacity must allow one more element. Lists are a handful of shards
// long: a plain insertion step beats a call to memmove.
func insertSorted(l []uint32, v uint32) []uint32 {
	for _, x := range l {
		if x == v {
			return l
		}
	}
	l = l[:len(l)+1]
	k := len(l) - 1
	for k > 0 && l[k-1] > v {
		l[k] = l[k-1]
		k--
	}
	l[k] = v
	return l
}

// µs converts a count of µs to a Duration, saturating at the largest
// Duration (292 years): a burst of 1e9 refilled at 1 per year resets in
// 1e9 years, which no Duration can hold.
func µs(v int64) time.Duration {
	switch {
	case v > math.MaxInt64/int64(time.Microsecond):
		return math.MaxInt64
	case v < math.MinInt64/int64(time.Microsecond):
		return math.MinInt64
	}
	return time.Duration(v) * time.Microsecond
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// decide fills p with the decision on b at now, by the arithmetic in the
// quota.Algorithm doc. It changes no state except dropping expired
// timestamps from a sliding window log, which the arithmetic does on every
// call.
func decide(p *pending, b *quota.Bucket, now int64) {
	lim := b.Limit
	c := b.Cost
	over := c > lim.Capacity()
	per := int64(lim.Period / time.Microsecond)
	// The longest wait the bucket may book, µs; without MaxWait -1, which
	// no wait (at least 1 µs) is within.
	mw := int64(b.MaxWait / time.Microsecond)
	if mw <= 0 {
		mw = -1
	}
	switch lim.Algorithm {
	case quota.TokenBucket:
		B, N, P, cf := float64(lim.Burst), float64(lim.Rate), float64(per), float64(c)
		tokens, ts := B, now
		if !p.fresh {
			tokens, ts = p.e.f, p.e.ts
		}
		elapsed := now - ts
		if elapsed < 0 {
			elapsed = 0
		}
		tokens = tokens + (float64(elapsed)*N)/P
		if tokens > B {
			tokens = B
		}
		p.allow = cf <= tokens
		// Below 0 tokens (a settlement's debt, units booked ahead) there
		// is nothing remaining.
		p.remNo = max(0, floorI(tokens))
		p.resetNo = ceilI(((B - tokens) * P) / N)
		if !p.allow && !over {
			p.retry = ceilI(((cf - tokens) * P) / N)
			if p.retry <= mw {
				p.allow, p.wait, p.retry = true, p.retry, 0
			}
		}
		if p.allow {
			t2 := tokens - cf
			p.f, p.ts = t2, now
			p.remCh = max(0, floorI(t2))
			p.resetCh = ceilI(((B - t2) * P) / N)
			p.expires = satAdd(now, max(p.resetCh, minTTL))
		}
	case quota.GCRA:
		B, N, P, cf := float64(lim.Burst), float64(lim.Rate), float64(per), float64(c)
		T := P / N
		// The explicit conversions forbid fused multiply-add (the Go spec
		// allows fusing otherwise), so every product is rounded on its own,
		// as in Lua.
		BT := float64(B * T)
		sl := quota.GCRASlack // at most half an emission interval
		if h := T / 2; h < sl {
			sl = h
		}
		tol := float64(BT + sl)
		// Times relative to quota.GCRAEpoch: the int64 difference is exact,
		// and so is its conversion for any now within 285 years of it.
		tf := float64(now - quota.GCRAEpoch)
		tat := tf
		if !p.fresh {
			tat = p.e.f
		}
		tat0 := tat
		if tf > tat0 {
			tat0 = tf
		}
		tat1 := tat0 + float64(cf*T)
		p.allow = tat1-tf <= tol
		p.remNo = max(0, floorI((tol-(tat0-tf))/T))
		p.resetNo = ceilI(tat0 - tf)
		if !p.allow && !over {
			p.retry = ceilI(tat1 - tf - BT - sl)
			if p.retry <= mw {
				p.allow, p.wait, p.retry = true, p.retry, 0
			}
		}
		if p.allow {
			p.f = tat1
			p.remCh = max(0, floorI((tol-(tat1-tf))/T))
			p.resetCh = ceilI(tat1 - tf)
			p.expires = satAdd(now, max(p.resetCh, minTTL))
		}
	case quota.SlidingWindowCounter:
		W, L := per, lim.Rate
		w := floorDiv(now, W)
		e := now - w*W
		var curr, prev int64
		if !p.fresh {
			switch p.e.win {
			case w:
				curr, prev = p.e.curr, p.e.prev
			case w - 1:
				prev = p.e.curr
			}
		}
		Wf, Lf := float64(W), float64(L)
		weighted := (float64(prev)*float64(W-e))/Wf + float64(curr)
		p.allow = weighted+float64(c) <= Lf
		p.remNo = max(0, floorI(Lf-weighted))
		p.resetNo = swcReset(curr, prev, w, W, now)
		if p.allow {
			p.win, p.curr, p.prev = w, curr+c, prev
			p.remCh = max(0, floorI(Lf-weighted-float64(c)))
			p.resetCh = swcReset(curr+c, prev, w, W, now)
			p.expires = (w + 2) * W
		} else if !over {
			if curr+c <= L {
				p.retry = ceilI(Wf-(float64(L-curr-c)*Wf)/float64(prev)) - e
			} else {
				p.retry = (W - e) + ceilI(math.Max(0, Wf-(float64(L-c)*Wf)/float64(curr)))
			}
		}
	case quota.SlidingWindowLog:
		W, L := per, lim.Rate
		var lg *ring
		var n int64
		if !p.fresh {
			lg = p.e.log
			lg.dropThrough(now - W)
			n = lg.total
		}
		p.allow = n+c <= L
		p.remNo = max(0, L-n) // a lowered limit can leave n > L
		if n > 0 {
			p.resetNo = lg.newest() + W - now
		}
		if p.allow {
			p.remCh = max(0, L-n-c)
			p.resetCh = p.resetNo
			if c > 0 {
				newest := now
				if n > 0 && lg.newest() > now {
					newest = lg.newest()
				}
				p.resetCh = newest + W - now
			}
		} else if !over {
			p.retry = lg.kth(n+c-L) + W - now
		}
	case quota.FixedWindow:
		W, L := per, lim.Rate
		w := floorDiv(now, W)
		var count int64
		if !p.fresh && p.e.win == w {
			count = p.e.curr
		}
		p.allow = count+c <= L
		p.remNo = max(0, L-count) // a lowered limit can leave count > L
		p.resetNo = (w+1)*W - now
		if p.allow {
			p.win, p.curr = w, count+c
			p.remCh = max(0, L-count-c)
			p.resetCh = p.resetNo
			p.expires = (w + 1) * W
		} else if !over {
			p.retry = (w+1)*W - now
		}
	}
	if over {
		p.allow = false
		p.retry = -1
	}
}

func swcReset(curr, prev, w, W, now int64) int64 {
	switch {
	case curr > 0:
		return (w+2)*W - now
	case prev > 0:
		return (w+1)*W - now
	}
	return 0
}

func floorI(x float64) int64 { return toInt(math.Floor(x)) }
func ceilI(x float64) int64  { return toInt(math.Ceil(x)) }

// satAdd returns a+b for b >= 0, saturating at the largest int64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// toInt converts an integral float to int64, saturating where Go's
// conversion would be undefined.
func toInt(x float64) int64 {
	switch {
	case x >= 0x1p63:
		return math.MaxInt64
	case x < -0x1p63:
		return math.MinInt64
	}
	return int64(x)
}

// commit writes p's new state for b. Called with every shard of the Take
// locked, only when the whole Take allowed.
func (s *Store) commit(p *pending, b *quota.Bucket, all []quota.Bucket, now int64) {
	e := p.e
	if e == nil {
		e = s.insert(&s.shards[p.shard], p.h, b.Key, all, now)
	}
	alg := b.Limit.Algorithm
	if e.alg != alg || p.fresh {
		// New state: wipe whatever another algorithm or an expired
		// history left behind (a log ring keeps its buffer).
		e.alg, e.f, e.ts, e.win, e.curr, e.prev = alg, 0, 0, 0, 0, 0
		if e.log != nil {
			e.log.clear()
		}
	}
	switch alg {
	case quota.TokenBucket, quota.GCRA:
		e.f, e.ts = p.f, p.ts
	case quota.SlidingWindowCounter, quota.FixedWindow:
		e.win, e.curr, e.prev = p.win, p.curr, p.prev
	case quota.SlidingWindowLog:
		if e.log == nil {
			e.log = new(ring)
		}
		if b.Cost > 0 {
			e.log.add(now, b.Cost)
		}
		if e.log.size == 0 {
			p.expires = now // empty: nothing to keep
		} else {
			p.expires = e.log.newest() + int64(b.Limit.Period/time.Microsecond)
		}
	}
	e.expires = satAdd(p.expires, ttlSlack)
}

// ttlSlack lengthens every state's life, in µs. It is 0 except in the test
// that shows the conformance vectors do not depend on when state expires.
var ttlSlack int64

// insert adds a new entry for key to sh, making room first if sh is full.
func (s *Store) insert(sh *shard, h uint64, key string, take []quota.Bucket, now int64) *entry {
	if sh.t.used >= sh.cap {
		evict(sh, take, now)
	} else {
		// Sweep: delete the sampled entries expired for more than
		// sweepGrace, except those the current Take uses.
		sh.t.scan(sweepSample, func(e *entry) bool {
			return now >= e.expires+sweepGrace && !inTake(e.key, take)
		})
	}
	e := newEntry(h, key)
	sh.t.put(e)
	return e
}

// evict makes room in a full shard: it examines up to evictSample entries
// from the shard's hand, deletes the expired ones, and if there were none
// deletes the examined entry closest to expiry (ties: the smallest key).
// Entries the current Take uses are never deleted: they are being
// committed (an expired one is about to be rewritten).
func evict(sh *shard, take []quota.Bucket, now int64) {
	var victim *entry
	expired := 0
	sh.t.scan(evictSample, func(e *entry) bool {
		switch {
		case inTake(e.key, take):
		case now >= e.expires:
			expired++
			return true
		case victim == nil || e.expires < victim.expires || (e.expires == victim.expires && e.key < victim.key):
			victim = e
		}
		return false
	})
	if expired == 0 && victim != nil {
		sh.t.remove(victim)
	}
}

func inTake(key string, take []quota.Bucket) bool {
	for i := range take {
		if take[i].Key == key {
			return true
		}
	}
	return false
}

// ring is a sliding window log: runs of (timestamp, count), oldest first,
// in a circular buffer that grows by doubling.
type ring struct {
	buf   []stamp
	head  int
	size  int
	total int64
}

type stamp struct{ t, n int64 }

func (r *ring) at(i int) *stamp { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *ring) newest() int64 { return r.at(r.size - 1).t }

func (r *ring) clear() { r.head, r.size, r.total = 0, 0, 0 }

// dropThrough removes every run with timestamp <= cut.
func (r *ring) dropThrough(cut int64) {
	for r.size > 0 {
		s := r.at(0)
		if s.t > cut {
			return
		}
		r.total -= s.n
		r.head = (r.head + 1) % len(r.buf)
		r.size--
	}
}

// kth returns the timestamp of the k-th oldest unit (k >= 1).
func (r *ring) kth(k int64) int64 {
	for i := 0; i < r.size; i++ {
		s := r.at(i)
		if k <= s.n {
			return s.t
		}
		k -= s.n
	}
	return r.newest()
}

// add records n units at t, keeping runs sorted by timestamp.
func (r *ring) add(t, n int64) {
	r.total += n
	if r.size > 0 {
		last := r.at(r.size - 1)
		if last.t == t {
			last.n += n
			return
		}
		if last.t > t {
			r.insertSorted(t, n)
			return
		}
	}
	if r.size == len(r.buf) {
		r.grow(r.size + 1)
	}
	*r.at(r.size) = stamp{t, n}
	r.size++
}

func (r *ring) grow(min int) {
	c := max(4, 2*len(r.buf), min)
	nb := make([]stamp, c)
	for i := 0; i < r.size; i++ {
		nb[i] = *r.at(i)
	}
	r.buf, r.head = nb, 0
}

// insertSorted handles a timestamp older than the newest run (the clock
// went backwards): rare, so it simply rebuilds the buffer.
func (r *ring) insertSorted(t, n int64) {
	nb := make([]stamp, 0, max(4, 2*(r.size+1)))
	placed := false
	for i := 0; i < r.size; i++ {
		s := *r.at(i)
		if !placed && s.t >= t {
			if s.t == t {
				s.n += n
			} else {
				nb = append(nb, stamp{t, n})
			}
			placed = true
		}
		nb = append(nb, s)
	}
	r.size = len(nb)
	r.buf, r.head = nb[:cap(nb)], 0
}
