package localfirst

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Store decides Leased and Async buckets locally and every other bucket
// with the exact store. See the package documentation. It is safe for
// concurrent use; Close returns what it holds.
type Store struct {
	exact  quota.Store
	ledger quota.Reporter
	cfg    config

	// shards hold the keys, split by a hash of the key so that takes of
	// different keys do not wait on one lock.
	shards [nShards]shard
	nkeys  atomic.Int64 // keys held, over every shard
	// evictNext picks the other shards a new key looks in for room.
	evictNext atomic.Uint32
	seed      maphash.Seed

	// wheel files the entries that hold or owe something (a lease,
	// unreported hits, units to give back) by when Sync next needs them.
	pmu       sync.Mutex
	wheel     wheel
	smu       sync.Mutex // held by a sync from start to end
	taken     []*entry   // a sync's entries, reused; guarded by smu
	jobs      []job      // a sync's reports and returns, reused; guarded by smu
	lastSweep atomic.Int64

	stop    chan struct{}
	stopped chan struct{}
	closed  atomic.Bool

	lastLog atomic.Int64
	st      counters

	// instance names this Store in its report calls (random, not 0) and
	// seq numbers them; lost holds the calls whose reply never came, to
	// resolve.
	instance uint64
	seq      atomic.Uint64
	lmu      sync.Mutex
	lost     []attempt
}

// New returns a Store that decides exact buckets with exact and leases
// from and reports to ledger: the fleet's budget, usually the Redis store
// itself (a *redisstore.Store; a *memstore.Store in process), where async
// hits and unspent lease units go in report calls, resolved rather than
// sent again when a call's reply never comes, so that no unit is charged
// or given back twice. exact is usually the fallback-guarded Redis store;
// exact may be ledger. A background goroutine runs Sync every few
// milliseconds until Close.
func New(exact quota.Store, ledger quota.Reporter, opts ...Option) (*Store, error) {
	c := config{
		clock:       floodgate.SystemClock(),
		instances:   func() int { return 1 },
		leaseTTL:    defaultLeaseTTL,
		leaseTarget: defaultLeaseTarget,
		leaseShare:  defaultLeaseShare,
		syncTimeout: defaultSyncTimeout,
		maxKeys:     defaultMaxKeys,
		logger:      slog.Default(),
	}
	if exact == nil {
		c.fail("New: nil exact store")
	}
	if ledger == nil {
		c.fail("New: nil ledger")
	} else if !reports(ledger) {
		c.fail("New: the ledger (%T) forwards report calls to a store that takes none (not a quota.Reporter); give it the Redis or memory store itself, or a wrapper of one", ledger)
	}
	for _, o := range opts {
		if o == nil {
			c.fail("nil Option")
			continue
		}
		o(&c)
	}
	if c.leaseTarget >= c.leaseTTL {
		c.fail("WithLeaseTarget: %s must be below the lease TTL %s", c.leaseTarget, c.leaseTTL)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	s := &Store{exact: exact, ledger: ledger, cfg: c, seed: maphash.MakeSeed(),
		stop: make(chan struct{}), stopped: make(chan struct{}), instance: instanceID()}
	for i := range s.shards {
		s.shards[i].entries = make(map[string]*entry)
	}
	s.wheel.cur = max(1, tickOf(c.clock.Now().UnixNano()))
	if c.manual {
		close(s.stopped)
	} else {
		go s.loop()
	}
	return s, nil
}

// instanceID returns a random, non-zero name for a Store's reports.
func instanceID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// mark makes e pending, filed on the wheel by its wake, or files it
// earlier when its wake moved before where it is filed; e.mu is held.
func (s *Store) mark(e *entry) {
	if e.queued {
		// Filed early enough, or taken by a Sync (which files it by its
		// wake when done): nothing to do, without the wheel's lock.
		if at := e.at.Load(); at == atNone || at == atNow || tickOf(e.wake.Load()) >= at {
			return
		}
		s.pmu.Lock()
		s.wheel.advance(e)
		s.pmu.Unlock()
		return
	}
	e.queued = true
	s.pmu.Lock()
	s.wheel.place(e)
	s.pmu.Unlock()
}

// DecidesOnStoreError reports whether the exact store, or a store
// beneath it (quota.Layers), answers every Take itself when its backend
// fails (see package tiers): a Store over a fallback store has every
// fail mode.
func (s *Store) DecidesOnStoreError() bool {
	for l := range quota.Layers(s.exact) {
		if d, ok := l.(interface{ DecidesOnStoreError() bool }); ok && d.DecidesOnStoreError() {
			return true
		}
	}
	return false
}

// reports reports whether every layer of s (quota.Layers) takes report
// calls: a wrapper that forwards Report (package otel's) reports only if
// what it wraps does.
func reports(s quota.Store) bool {
	for l := range quota.Layers(s) {
		if _, ok := l.(quota.Reporter); !ok {
			return false
		}
	}
	return true
}

// maxStack is how many buckets one Take handles without allocating.
const maxStack = 8

// held is one local bucket of a Take in progress.
type held struct {
	i     int    // index in buckets
	e     *entry // nil: over the key bound, decided exactly
	local bool   // reserved locally (undone on a deny)
	extra int64  // lease units asked for on top of the cost
	cold  bool   // an async bucket decided exactly: its cost exceeds the share
}

// Take implements quota.Store: see the package documentation.
func (s *Store) Take(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	nLocal := 0
	for i := range buckets {
		if buckets[i].Consistency != quota.Exact {
			nLocal++
		}
	}
	if nLocal == 0 {
		return s.exact.Take(ctx, buckets, res)
	}
	return s.takeLocal(ctx, buckets, res, nLocal)
}

// takeLocal is Take for a take with local buckets. It is a call of its
// own, never inlined, so that its buffers are on the stack only when a
// take has local buckets: a take of exact buckets alone goes through Take
// to the exact store with a small frame, and the goroutine's stack,
// which the runtime shrinks while it idles, need not grow for it.
//
//go:noinline
func (s *Store) takeLocal(ctx context.Context, buckets []quota.Bucket, res []quota.Result, nLocal int) (bool, error) {
	if err := quota.ValidateTake(buckets, res); err != nil {
		return false, err
	}
	if localAtMost(buckets) {
		return s.takeAtMost(ctx, buckets, res)
	}
	now := s.cfg.clock.Now()
	n := max(1, s.cfg.instances())
	var hs [maxStack]held
	hl := hs[:0]
	allowed := true
	for i := range buckets {
		b := &buckets[i]
		if b.Consistency == quota.Exact {
			continue
		}
		e := s.lockedEntry(b, now)
		h := held{i: i, e: e}
		if e != nil {
			switch b.Consistency {
			case quota.Leased:
				var deny bool
				h.local, h.extra, deny = e.reserveLease(b, now, n, &s.cfg, &res[i])
				if deny { // the store denied the key moments ago
					allowed = false
				}
				if h.local {
					s.mark(e)
				}
			default:
				var deny bool
				h.local, h.cold, deny = e.reserveAsync(b, now, n, &res[i])
				if deny {
					allowed = false
				}
				if h.local {
					s.mark(e)
				}
			}
			e.mu.Unlock()
		}
		hl = append(hl, h)
	}
	if !allowed {
		s.undoRes(hl, buckets, res)
		s.fillUndecided(buckets, res, hl)
		s.st.localDenied.Add(1)
		return false, nil
	}
	// The exact store decides the exact buckets and every local bucket
	// that was not reserved (a lease to take, a cold async key).
	nStore := len(buckets) - nLocal
	for _, h := range hl {
		if !h.local {
			nStore++
		}
	}
	if nStore == 0 {
		s.st.localAllowed.Add(1)
		return true, nil
	}
	return s.takeStore(ctx, buckets, res, hl, nStore, now, n)
}

// storeBuf is what takeStore hands the exact store: the buckets it
// takes and their results. The store is an interface, so arrays passed
// to it escape: pooled, a take that goes to the store (a lease, a cold
// key) allocates none for them (8 Buckets are 1.4 KB).
type storeBuf struct {
	bs [maxStack]quota.Bucket
	rs [maxStack]quota.Result
}

var storeBufs = sync.Pool{New: func() any { return new(storeBuf) }}

// put clears the first n buckets and results (the keys must not be kept
// alive) and returns buf to the pool.
func (buf *storeBuf) put(n int) {
	n = min(n, maxStack) // takeStore's sub outgrew buf: what it filled of buf is all of buf
	clear(buf.bs[:n])
	clear(buf.rs[:n])
	storeBufs.Put(buf)
}

// takeStore asks the exact store for the exact buckets and every local
// bucket Take could not reserve (a lease to take, a cold async key), and
// settles the local ones with its answer. It is a call of its own, never
// inlined, so that its frame is on the stack only when a take goes to
// the store, not on every local decision.
//
//go:noinline
func (s *Store) takeStore(ctx context.Context, buckets []quota.Bucket, res []quota.Result, hl []held, nStore int, now time.Time, n int) (bool, error) {
	var ibuf [maxStack]int
	var (
		sub    []quota.Bucket
		subRes []quota.Result
		idx    = ibuf[:0]
	)
	if nStore > maxStack {
		sub, subRes, idx = make([]quota.Bucket, 0, nStore), make([]quota.Result, 0, nStore), make([]int, 0, nStore)
	} else {
		buf := storeBufs.Get().(*storeBuf)
		defer func() { buf.put(len(sub)) }()
		sub, subRes = buf.bs[:0], buf.rs[:0]
	}
	extras := false
	j := 0
	for i := range buckets {
		if buckets[i].Consistency == quota.Exact {
			sub = append(sub, buckets[i])
			idx = append(idx, i)
			continue
		}
		h := &hl[j]
		j++
		if h.local {
			continue
		}
		b := buckets[i]
		b.Cost += h.extra
		if b.Consistency == quota.Leased {
			// A lease is units taken now: it never books any ahead
			// (package tiers refuses max_wait on leased rules).
			b.MaxWait = 0
		}
		extras = extras || h.extra > 0
		sub = append(sub, b)
		idx = append(idx, i)
	}
	subRes = subRes[:len(sub)]
	ok, err := s.exact.Take(ctx, sub, subRes)
	if err == nil && !ok && extras && s.shrinkLeases(buckets, hl, sub, subRes, idx) {
		// The extra units, not the request, were what the store could
		// not give: ask again with leases that fit.
		ok, err = s.exact.Take(ctx, sub, subRes)
	}
	if err != nil {
		s.undo(hl, buckets)
		return false, err
	}
	for k, i := range idx {
		res[i] = subRes[k]
	}
	s.settle(buckets, hl, res, ok, now, n)
	if ok && extras {
		s.unlease(ctx, buckets, hl, res)
	}
	if !ok {
		s.undoRes(hl, buckets, res)
		return false, nil
	}
	s.st.storeAllowed.Add(1)
	return true, nil
}

// unlease gives back the extra units of leases a take asked for but that
// the exact store's fallback decided without the store (the store was
// slow or down): it admitted, and charged, the request's cost plus the
// extra units on its local share, but no lease was granted (settle learns
// nothing from a fallback's answer), so the extra units would be spent
// nowhere while the fallback charges them to the store when it answers
// again. They are settled back where they were charged (quota.Settler,
// Source local_fallback), best effort: an exact store that cannot settle
// keeps them.
func (s *Store) unlease(ctx context.Context, buckets []quota.Bucket, hl []held, res []quota.Result) {
	st, ok := s.exact.(quota.Settler)
	if !ok {
		return
	}
	for k := range hl {
		h := &hl[k]
		if h.local || h.extra <= 0 || res[h.i].Source != floodgate.SourceLocalFallback {
			continue
		}
		b := buckets[h.i]
		b.Cost = -h.extra
		_ = st.Settle(ctx, []quota.Bucket{b}, []quota.Result{res[h.i]})
	}
}

// shrinkLeases lowers the extra units of lease buckets the store denied
// but that had room for the request itself, to what was left; it reports
// whether anything changed (and so whether to ask again).
func (s *Store) shrinkLeases(buckets []quota.Bucket, hl []held, sub []quota.Bucket, subRes []quota.Result, idx []int) bool {
	changed := false
	for k, i := range idx {
		if subRes[k].Allowed {
			continue
		}
		h := findHeld(hl, i)
		if h == nil || h.extra == 0 {
			continue
		}
		cost := buckets[i].Cost
		room := max(0, subRes[k].Remaining-cost)
		if subRes[k].Remaining < cost {
			// The request itself does not fit: the deny stands, and its
			// retry-after is the refill of the request's units, not of
			// the lease's too (leased buckets refill at a steady rate, so
			// the extra units' share of it is theirs alone; rounded down,
			// it never makes the retry-after too short).
			if r := &subRes[k]; r.RetryAfter > 0 {
				l := buckets[i].Limit
				if l.Rate > 0 {
					r.RetryAfter = max(time.Microsecond, r.RetryAfter-time.Duration(float64(h.extra)*unitNanos(l)))
				}
			}
			continue
		}
		h.extra = min(h.extra, room)
		sub[k].Cost = cost + h.extra
		changed = true
	}
	return changed
}

func findHeld(hl []held, i int) *held {
	for k := range hl {
		if hl[k].i == i {
			return &hl[k]
		}
	}
	return nil
}

// settle records what the exact store answered for local buckets: leases
// granted, the state of async keys whose cost went to the store.
func (s *Store) settle(buckets []quota.Bucket, hl []held, res []quota.Result, ok bool, now time.Time, n int) {
	for k := range hl {
		h := &hl[k]
		if h.local || h.e == nil {
			continue
		}
		r := &res[h.i]
		if r.Source != "" && r.Source != floodgate.SourceStore {
			// Decided without the store (its fallback, or its denial
			// cache): nothing was leased from it, nothing learned.
			continue
		}
		h.e.mu.Lock()
		if h.e.dropped {
			// Idle while the store answered, the entry was swept or
			// evicted: what the answer teaches or grants goes to the
			// key's entry now (none, when the key bound leaves no room:
			// a lease granted then is not held, its units come back by
			// refill).
			h.e.mu.Unlock()
			if h.e = s.lockedEntry(&buckets[h.i], now); h.e == nil {
				continue
			}
		}
		switch {
		case !ok && !r.Allowed && buckets[h.i].Consistency == quota.Leased:
			h.e.deny(*r, buckets[h.i].Cost, now, n, &s.cfg)
		case h.cold:
			// A deny leaves the bucket as it was: its remaining is still
			// the store's state, so it teaches the same.
			h.e.learn(float64(r.Remaining), now, n)
			if h.e.u > 0 {
				// A smaller share shortens the cadence of what this
				// instance holds unreported: its report may be due
				// sooner.
				h.e.sooner(h.e.lastReport.Add(h.e.reportEvery()))
				s.mark(h.e)
			}
		case ok && buckets[h.i].Consistency == quota.Leased:
			h.e.granted(h.extra, r.Remaining, now, &s.cfg)
			if h.extra > 0 {
				s.st.leases.Add(1)
				s.st.leasedUnits.Add(uint64(h.extra))
				s.mark(h.e)
			}
		}
		h.e.mu.Unlock()
	}
}

// undo gives back every local reservation of a Take that did not pass.
func (s *Store) undo(hl []held, buckets []quota.Bucket) {
	for k := range hl {
		h := &hl[k]
		if !h.local {
			continue
		}
		h.e.mu.Lock()
		h.e.cancel(buckets[h.i].Consistency, buckets[h.i].Cost)
		h.e.mu.Unlock()
		h.local = false
	}
}

// undoRes is undo for a Take whose results were written: nothing it
// reserved is booked, so no result reports a wait.
func (s *Store) undoRes(hl []held, buckets []quota.Bucket, res []quota.Result) {
	for k := range hl {
		res[hl[k].i].Wait = 0
	}
	s.undo(hl, buckets)
}

// fillUndecided gives the exact buckets of a Take denied locally, which
// the store was never asked about, a neutral Result: allowed by
// themselves, nothing known.
func (s *Store) fillUndecided(buckets []quota.Bucket, res []quota.Result, hl []held) {
	neutral := func(i int) {
		c := buckets[i].Limit.Capacity()
		res[i] = quota.Result{Allowed: true, Limit: c, Remaining: c}
	}
	for i := range buckets {
		if buckets[i].Consistency == quota.Exact {
			neutral(i)
		}
	}
	for _, h := range hl {
		if res[h.i] == (quota.Result{}) {
			neutral(h.i)
		}
	}
}

// nShards is the number of key shards (a power of two).
const nShards = 64

// shard is one part of the key table.
type shard struct {
	mu      sync.Mutex
	entries map[string]*entry
	_       [48]byte // keep shards' locks on separate cache lines
}

func (s *Store) shardOf(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&(nShards-1)]
}

// entry returns the local state of b's key, creating it; nil when the key
// bound is reached and no idle key can make room.
func (s *Store) entry(b *quota.Bucket, now time.Time) *entry {
	sh := s.shardOf(b.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.entries[b.Key]
	if ok {
		e.touched = now
		if e.limit != b.Limit || e.mode != b.Consistency {
			e.mu.Lock()
			e.reset(b, now)
			e.mu.Unlock()
		}
		return e
	}
	if s.nkeys.Load() >= int64(s.cfg.maxKeys) && !s.makeRoomLocked(sh, now) {
		s.st.overflow.Add(1)
		return nil
	}
	e = &entry{}
	e.reset(b, now)
	e.touched = now
	sh.entries[b.Key] = e
	s.nkeys.Add(1)
	return e
}

// lockedEntry returns the local state of b's key as entry does, locked
// (e.mu held), and never one dropped from its shard since entry found it
// (a sweep or an eviction between the lookup and the lock): then it looks
// again.
func (s *Store) lockedEntry(b *quota.Bucket, now time.Time) *entry {
	for {
		e := s.entry(b, now)
		if e == nil {
			return nil
		}
		e.mu.Lock()
		if !e.dropped {
			return e
		}
		e.mu.Unlock()
	}
}

// evictShards is how many shards besides its own a new key looks in for
// an idle key to replace, when the key bound is reached.
const evictShards = 3

// makeRoomLocked drops an idle entry to make room for a new key of sh
// (whose lock is held): one of sh's, or else one of evictShards other
// shards' whose lock is free (a shard a take holds is passed over, so no
// two takes wait on each other's shard). Keys land in shards unevenly: a
// shard can run out of idle keys while others have many.
func (s *Store) makeRoomLocked(sh *shard, now time.Time) bool {
	if sh.evictIdleLocked(&s.nkeys, now) {
		return true
	}
	for range evictShards {
		o := &s.shards[s.evictNext.Add(1)&(nShards-1)]
		if o == sh || !o.mu.TryLock() {
			continue
		}
		ok := o.evictIdleLocked(&s.nkeys, now)
		o.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// evictSample is how many of a shard's entries a new key looks at for an
// idle one to replace when the key bound is reached.
const evictSample = 8

// evictAfter is how long a key must have gone untouched to be replaced
// by a new one. A Take finds its entry under the shard's lock and locks
// the entry after: an entry replaced in between is dropped, and that Take
// looks for its key again (lockedEntry) instead of spending it while the
// next one starts afresh.
const evictAfter = time.Second

// evictIdleLocked drops one idle entry (nothing held, nothing owed, not
// touched for evictAfter) of the shard, among evictSample of them (a
// map's iteration starts at a random place); it reports whether it made
// room. A bounded look keeps a
// flood of new keys from costing a scan of the shard each: at 100 000
// keys none idle, a new key cost 113 µs under the shard's lock, against
// the exact store's take it then gets (BenchmarkTakeNewKeyFull).
func (sh *shard) evictIdleLocked(nkeys *atomic.Int64, now time.Time) bool {
	n := 0
	for k, e := range sh.entries {
		if n++; n > evictSample {
			break
		}
		if now.Sub(e.touched) < evictAfter {
			continue
		}
		e.mu.Lock()
		idle := e.idle() && !e.queued
		e.dropped = e.dropped || idle
		e.mu.Unlock()
		if idle {
			delete(sh.entries, k)
			nkeys.Add(-1)
			return true
		}
	}
	return false
}

// ceilDur rounds a duration in nanoseconds up, saturating.
func ceilDur(d float64) time.Duration {
	if d >= float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Ceil(d))
}
