package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Defaults and bounds of the Store's options, and of its upkeep.
const (
	// defaultMaxKeys is the key cap when WithMaxKeys is not given.
	defaultMaxKeys = 1 << 20
	// defaultShards is the number of shards when WithShards is not given.
	defaultShards = 64
	// maxShards is the largest value WithShards accepts.
	maxShards = 1 << 16
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

// WithMaxKeys caps the number of buckets the Store keeps (default 2^20,
// 1 048 576; at least 1). See the package doc for what happens when
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

// WithShards sets the number of independently locked shards (default 64;
// 1 to 65 536). It is lowered to the key cap when the
// cap is smaller, so every shard can hold at least one key.
func WithShards(n int) Option {
	return func(cfg *config) {
		if n < 1 || n > maxShards {
			cfg.fail("WithShards: shard count %d must be in [1, %d]", n, maxShards)
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

	// Report's records of calls (see Store.Report), swept of expired ones
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
	// under is the limit the state was written under (carry.go): a
	// token bucket's burst, GCRA's emission interval, a fixed window's
	// end (µs), a sliding window counter's window (µs).
	under float64
	// rate is the rate a token bucket was written under, units per µs.
	rate float64
	log  *ring
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
	cfg := config{clock: floodgate.SystemClock(), maxKeys: defaultMaxKeys, shards: defaultShards}
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
	under   float64
	rate    float64
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
	if hasAtMost(buckets) {
		buckets = grant(ps, buckets, now)
	}
	allowed := true
	for i := range buckets {
		p := &ps[i]
		b := &buckets[i]
		p.fresh = p.e == nil || p.e.alg != b.Limit.Algorithm || now >= p.e.expires
		switch b.Limit.Algorithm { // decide's switch, saving it a call
		case quota.TokenBucket:
			decideTokenBucket(p, b, now)
		case quota.GCRA:
			decideGCRA(p, b, now)
		case quota.SlidingWindowCounter:
			decideSlidingCounter(p, b, now)
		case quota.SlidingWindowLog:
			decideSlidingLog(p, b, now)
		case quota.FixedWindow:
			decideFixedWindow(p, b, now)
		}
		allowed = allowed && p.allow
	}
	if allowed {
		for i := range buckets {
			// A cost of 0 reads: its state stays as written (under the
			// limit it was written under, quota.Algorithm "Limit changes").
			if buckets[i].Cost != 0 {
				s.commit(&ps[i], &buckets[i], buckets, now)
			}
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
			if buckets[i].AtMost {
				r.Granted = buckets[i].Cost
			}
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

// hasAtMost reports whether a bucket of the take asks for a partial grant.
func hasAtMost(buckets []quota.Bucket) bool {
	for i := range buckets {
		if buckets[i].AtMost {
			return true
		}
	}
	return false
}

// grant decides a partial grant (quota.Bucket.AtMost): it reads each
// AtMost bucket's remaining as it stands and returns a copy of buckets
// whose AtMost buckets cost the grant, the least of their Cost and those
// remainings, and at least 1 unless the Cost is 0 (then the take denies
// as a take of one unit would). Called with the take's shards locked, so
// the grant and the charge see the same state.
func grant(ps []pending, buckets []quota.Bucket, now int64) []quota.Bucket {
	g := int64(-1)
	for i := range buckets {
		b := &buckets[i]
		if !b.AtMost {
			continue
		}
		p := &ps[i]
		p.fresh = p.e == nil || p.e.alg != b.Limit.Algorithm || now >= p.e.expires
		decide(p, b, now)
		if g < 0 || p.remNo < g {
			g = p.remNo
		}
		g = min(g, b.Cost)
	}
	bs := append([]quota.Bucket(nil), buckets...)
	for i := range bs {
		if b := &bs[i]; b.AtMost && b.Cost > 0 {
			b.Cost = max(1, g)
		}
	}
	return bs
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
		e.f, e.ts, e.under, e.rate = p.f, p.ts, p.under, p.rate
	case quota.SlidingWindowCounter, quota.FixedWindow:
		e.win, e.curr, e.prev, e.under = p.win, p.curr, p.prev, p.under
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
