package concurrency

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults and bounds.
const (
	// DefaultRetryAfter is the RetryAfter of a deny.
	DefaultRetryAfter = 100 * time.Millisecond
	// DefaultPolicy is the global cap's policy name.
	DefaultPolicy = "concurrency"
	// DefaultMaxKeys is a per-key cap's MaxKeys when it is 0.
	DefaultMaxKeys = 10_000
	// DefaultQueue is Wait.Queue when it is 0.
	DefaultQueue = 1000
	// DefaultWaitTarget is Wait.Target when it is 0: under CoDel, the
	// wait a standing queue is cut to (CoDel's target, RFC 8289).
	DefaultWaitTarget = 5 * time.Millisecond
	// DefaultWaitInterval is Wait.Interval when it is 0: under CoDel,
	// how long the queue must stay non-empty to stand.
	DefaultWaitInterval = 100 * time.Millisecond
	// MaxPerKeyCaps is the most per-key caps one Limiter holds (and the
	// most fleet caps a fleetconc.Limiter holds); it keeps Admit free of
	// allocations.
	MaxPerKeyCaps = 8
)

// ErrTooManyKeys is returned with a deny when a per-key cap already tracks
// PerKey.MaxKeys keys and the request's key is a new one.
var ErrTooManyKeys = errors.New("concurrency: per-key cap tracks its maximum number of keys; new key denied")

// keyFunc is PerKey.Key: the key a per-key cap counts a request under.
type keyFunc = func(r *floodgate.Request) (key string, ok bool)

// Limiter is the in-flight limiter, a floodgate.Admitter. It is safe for
// concurrent use. See the package documentation.
type Limiter struct {
	inflight      atomic.Int64
	global        atomic.Int64 // the global cap; SetGlobal changes it
	hasGlobal     bool         // built WithGlobal
	globalName    string
	keys          []*keyLimit
	retryAfter    time.Duration
	releaseGlobal floodgate.Done
	tickets       sync.Pool // *ticket for local multi-key releases
	wait          waiters   // requests waiting for a slot (WithWait)
}

var _ floodgate.Admitter = (*Limiter)(nil)

// New returns a Limiter with the given caps; at least one is required. It
// returns an error naming every bad option.
func New(opts ...Option) (*Limiter, error) {
	o := config{retryAfter: DefaultRetryAfter, globalName: DefaultPolicy, clock: floodgate.SystemClock()}
	for _, opt := range opts {
		if opt == nil {
			o.errs = append(o.errs, errors.New("concurrency: nil Option"))
			continue
		}
		opt(&o)
	}
	o.checkCaps()
	if len(o.errs) > 0 {
		return nil, errors.Join(o.errs...)
	}
	l := &Limiter{hasGlobal: o.global > 0, globalName: o.globalName, retryAfter: o.retryAfter}
	l.global.Store(o.global)
	for _, c := range o.perKey {
		l.keys = append(l.keys, newKeyLimit(l, c))
	}
	if l.hasGlobal {
		l.releaseGlobal = func(floodgate.Result) {
			l.inflight.Add(-1)
			l.wait.freed()
		}
	}
	l.wait.init(o.wait, o.clock, l.try)
	l.tickets.New = func() any {
		t := &ticket{l: l}
		t.done = t.releaseLocal
		return t
	}
	return l, nil
}

// InFlight returns the requests in flight under the global cap (0 when the
// Limiter has none).
func (l *Limiter) InFlight() int64 { return l.inflight.Load() }

// Global returns the global cap (0 when the Limiter was built without
// WithGlobal).
func (l *Limiter) Global() int64 { return l.global.Load() }

// SetGlobal changes the global cap at run time (a policy reload, see
// package policyfile) to limit (>= 1). Requests already in flight stay admitted;
// when the cap falls below them, new requests are denied until enough have
// finished. It returns an error, and changes nothing, when limit < 1 or
// the Limiter was built without WithGlobal (a cap cannot be added after
// construction: requests admitted before would never have been counted).
func (l *Limiter) SetGlobal(limit int64) error {
	if !l.hasGlobal {
		return errors.New("concurrency: SetGlobal: the Limiter was built without WithGlobal")
	}
	if limit < 1 {
		return fmt.Errorf("concurrency: SetGlobal: limit %d must be >= 1", limit)
	}
	l.global.Store(limit)
	l.wait.wake() // a higher cap lets waiting requests in
	return nil
}

// SetWait changes how long a request may wait for a slot at run time (a
// policy reload, see package policyfile); Wait{} stops new requests from
// waiting. Requests already waiting keep their bound; a smaller Queue
// applies as new requests join. A bad w is reported by field and changes
// nothing.
func (l *Limiter) SetWait(w Wait) error {
	if err := w.Validate(); err != nil {
		return err
	}
	if err := l.wait.checkScopes(w); err != nil {
		return err
	}
	l.wait.set(w)
	return nil
}

// Wait returns how long a request may wait for a slot (defaults applied).
func (l *Limiter) Wait() Wait { return *l.wait.cfg.Load() }

// RequireScopes is told by the transport (package interceptor) which
// identities it fills: with strict (WithStrictIdentity, and package
// guard), a Wait whose Fairness is by an identity not among them is an
// error, now and at every SetWait, for it would count every request as
// one caller's.
func (l *Limiter) RequireScopes(transport string, resolvable []string, strict bool) error {
	return l.wait.requireScopes(resolvable, strict)
}

// Waiting returns the requests waiting for a slot now.
func (l *Limiter) Waiting() int { return int(l.wait.n.Load()) }

// binding tracks the cap with the least room left among those taken.
type binding struct {
	policy    string
	limit     int64
	remaining int64
	set       bool
}

func (b *binding) offer(policy string, limit, remaining int64) {
	if !b.set || remaining < b.remaining {
		*b = binding{policy: policy, limit: limit, remaining: remaining, set: true}
	}
}

// Admit implements floodgate.Admitter. With WithWait, a request that
// finds a cap full waits for a slot (see the package documentation,
// "Waiting for a slot"); while requests wait, a new one joins them rather
// than take a slot that frees ahead of them.
func (l *Limiter) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	if l.wait.enabled() && l.wait.n.Load() > 0 {
		return l.wait.wait(ctx, r, nil)
	}
	d, done, _, err := l.try(r)
	if d.Allowed {
		return d, l.wait.hold(r, done), err
	}
	if !l.wait.enabled() {
		return d, done, err
	}
	if err != nil { // not a full cap (too many keys): no wait
		l.wait.wake() // r may have held a slot for a moment
		return d, done, err
	}
	return l.wait.wait(ctx, r, &d)
}

// try admits r if every cap has room now; all reports that the global
// cap, which refuses every request, denied it.
func (l *Limiter) try(r *floodgate.Request) (floodgate.Decision, floodgate.Done, bool, error) {
	var b binding
	if l.hasGlobal {
		for {
			n := l.inflight.Load()
			g := l.global.Load()
			if n >= g {
				return l.deny(r, l.globalName, g, floodgate.SourceConcurrency), nil, true, nil
			}
			if l.inflight.CompareAndSwap(n, n+1) {
				b.offer(l.globalName, g, g-n-1)
				break
			}
		}
	}
	var (
		held  [MaxPerKeyCaps]*entry
		nheld int
	)
	for _, k := range l.keys {
		c := k.cfg.Load()
		key, ok := c.Key(r)
		if !ok {
			continue
		}
		e, n, err := k.acquire(c, key)
		if e == nil {
			l.releaseHeld(held[:nheld])
			return l.deny(r, c.Name, c.Cap, floodgate.SourceConcurrency), nil, false, err
		}
		held[nheld] = e
		nheld++
		b.offer(c.Name, c.Cap, c.Cap-n)
	}
	return l.allow(r, &b, floodgate.SourceConcurrency), l.localDone(held[:nheld]), false, nil
}

// localDone returns the Done releasing held and the global slot: a
// prebuilt one for at most one entry, else a pooled ticket.
func (l *Limiter) localDone(held []*entry) floodgate.Done {
	switch len(held) {
	case 0:
		return l.releaseGlobal
	case 1:
		return held[0].releaseAll
	}
	t := l.tickets.Get().(*ticket)
	t.n = copy(t.entries[:], held)
	return t.done
}

// releaseLocal releases local entries and the global slot, and hands
// what it freed to requests waiting for a slot.
func (l *Limiter) releaseLocal(held []*entry) {
	l.releaseHeld(held)
	l.wait.freed()
}

// releaseHeld releases local entries and the global slot a try took; a
// failed try of a request that waits is followed by a scan of the
// waiting requests, which sees what it freed.
func (l *Limiter) releaseHeld(held []*entry) {
	for i := len(held) - 1; i >= 0; i-- {
		held[i].kl.release(held[i])
	}
	if l.hasGlobal {
		l.inflight.Add(-1)
	}
}

func (l *Limiter) allow(r *floodgate.Request, b *binding, src floodgate.Source) floodgate.Decision {
	return floodgate.Decision{
		Allowed:   true,
		Stage:     floodgate.StageConcurrency,
		Source:    src,
		Policy:    b.policy,
		Limit:     b.limit,
		Remaining: b.remaining,
		Priority:  r.Priority,
	}
}

func (l *Limiter) deny(r *floodgate.Request, policy string, limit int64, src floodgate.Source) floodgate.Decision {
	return floodgate.Decision{
		Allowed:    false,
		Stage:      floodgate.StageConcurrency,
		Source:     src,
		Policy:     policy,
		Limit:      limit,
		Remaining:  0,
		RetryAfter: l.retryAfter,
		Priority:   r.Priority,
	}
}

// ticket releases several local entries (pooled; Done exactly once).
type ticket struct {
	l       *Limiter
	entries [MaxPerKeyCaps]*entry
	n       int
	done    floodgate.Done
}

func (t *ticket) releaseLocal(floodgate.Result) {
	l := t.l
	l.releaseLocal(t.entries[:t.n])
	clear(t.entries[:t.n])
	t.n = 0
	l.tickets.Put(t)
}

// keyLimit is one per-key cap on this instance: sharded maps of key ->
// entry, entries deleted at count 0 and recycled.
type keyLimit struct {
	l *Limiter
	// cfg is the cap's description, MaxKeys defaulted; SetPerKey swaps
	// it. A request reads it once, so it decides by one description.
	cfg    atomic.Pointer[PerKey]
	size   atomic.Int64
	seed   maphash.Seed
	shards [numShards]shard
}

const (
	numShards   = 64
	maxFreeList = 64
	// maxIdle entries per shard stay in the map at count 0, so that a hot
	// key does not delete and re-insert its entry on every request.
	maxIdle = 4
)

type shard struct {
	mu   sync.Mutex
	m    map[string]*entry // active (n > 0) and idle (n == 0) entries
	idle int               // idle entries in m, at most maxIdle
	free []*entry
	_    [32]byte // keep shards on separate cache lines
}

// entry counts one key's requests in flight. Its release functions are
// built once, when the entry is first allocated, and survive recycling.
type entry struct {
	kl         *keyLimit
	sh         *shard
	key        string
	n          int64 // guarded by sh.mu
	releaseAll floodgate.Done
}

func newKeyLimit(l *Limiter, c PerKey) *keyLimit {
	k := &keyLimit{l: l, seed: maphash.MakeSeed()}
	k.cfg.Store(&c)
	for i := range k.shards {
		k.shards[i].m = make(map[string]*entry)
	}
	return k
}

func (k *keyLimit) shardOf(key string) *shard {
	return &k.shards[maphash.String(k.seed, key)%numShards]
}

// acquire takes a slot for key under c, the cap's description. It
// returns the entry and the count after taking it, or a nil entry with
// the current count (and ErrTooManyKeys when the key table is full).
func (k *keyLimit) acquire(c *PerKey, key string) (*entry, int64, error) {
	sh := k.shardOf(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil || e.n == 0 { // a new or idle key becomes active
		if k.size.Add(1) > int64(c.MaxKeys) {
			k.size.Add(-1)
			sh.mu.Unlock()
			return nil, 0, ErrTooManyKeys
		}
	}
	if e != nil && e.n == 0 {
		sh.idle--
	} else if e == nil {
		if n := len(sh.free); n > 0 {
			e = sh.free[n-1]
			sh.free[n-1] = nil
			sh.free = sh.free[:n-1]
		} else {
			e = k.newEntry()
		}
		e.sh, e.key = sh, key
		sh.m[key] = e
	}
	if e.n >= c.Cap {
		n := e.n
		sh.mu.Unlock()
		return nil, n, nil
	}
	e.n++
	n := e.n
	sh.mu.Unlock()
	return e, n, nil
}

func (k *keyLimit) newEntry() *entry {
	e := &entry{kl: k}
	l := k.l
	e.releaseAll = func(floodgate.Result) {
		k.release(e)
		if l.hasGlobal {
			l.inflight.Add(-1)
		}
		l.wait.freed()
	}
	return e
}

func (k *keyLimit) release(e *entry) {
	sh := e.sh
	sh.mu.Lock()
	e.n--
	if e.n > 0 {
		sh.mu.Unlock()
		return
	}
	k.size.Add(-1)
	if sh.idle < maxIdle {
		sh.idle++ // stays in the map, idle, for the key's next request
		sh.mu.Unlock()
		return
	}
	delete(sh.m, e.key)
	e.key, e.sh, e.n = "", nil, 0
	if len(sh.free) < maxFreeList {
		sh.free = append(sh.free, e)
	}
	sh.mu.Unlock()
}
