// Package concurrency is floodgate's in-flight limiter: it caps how many
// requests run at once, per instance, per key on this instance, and per key
// across the whole fleet through Redis.
//
// What this package decides: whether one more request may start now, given
// the requests already in flight that it admitted and whose Done has not
// been called. A Limiter holds any combination of
//
//   - a global cap (WithGlobal): requests in flight on this instance;
//   - per-key caps (WithPerKey): requests in flight on this instance per
//     key, the key computed from the Request by a function (for example
//     "20 in flight per user on /search.v1.Search/Query");
//   - fleet per-key caps (WithFleetPerKey): requests in flight per key across
//     every instance sharing one Redis.
//
// A request is admitted only if every cap that applies has room; caps are
// taken in that order and a deny releases those already taken. A deny is a
// Decision with Allowed false, Policy naming the cap, Limit = the cap,
// Remaining = 0 and RetryAfter (100ms unless WithRetryAfter says otherwise);
// transports turn it into RESOURCE_EXHAUSTED / 429. An allow names the cap
// with the least room left (Policy, Limit, Remaining).
//
// # Done
//
// Done releases everything the request took. The transport calls it exactly
// once, by defer, so it runs on return, panic, cancellation and stream end.
// Local releases are prebuilt (one per limiter, one per tracked key entry)
// so Admit+Done allocates nothing on the local path; the price is that a
// second call of a local Done is a caller bug that would release a slot some
// other request holds. A Done that includes fleet slots is a fresh object
// and is idempotent: a second call releases nothing.
//
// # Bounded memory
//
// A per-key cap tracks only keys with requests in flight: an entry is
// created on a key's first request and deleted when its count drops back to
// 0, and deleted entries are recycled; so that a hot key does not delete and
// re-insert its entry on every request, up to 4 entries per shard (256 per
// cap) are kept idle at count 0 instead. At most MaxKeys keys (default
// 10 000) are in flight at once per cap; when that many distinct keys are in flight, a
// request for a new key is denied (the cap's Policy, RetryAfter, and the
// error ErrTooManyKeys) rather than admitted untracked: so many distinct
// callers at once is itself overload.
//
// # Fleet caps
//
// A fleet per-key cap keeps, per key, a Redis sorted set of request IDs
// scored by the time their lease expires. Acquiring is one Lua script:
// remove expired IDs, count the rest, add this request's ID with expiry
// now + lease if the count is under the cap. Done removes the ID (ZREM). A
// crashed instance never removes its IDs; they expire after the lease
// (default 30s), so the lease must exceed the longest request (Run renews
// the leases of requests still in flight, every lease/3, for longer ones).
// When Redis cannot answer, the cap acts by its FailMode: FailOpen (the
// default, as Stripe advises for limiters) admits without a fleet slot and
// marks the decision SourceFailOpen; FailClosed denies with SourceFailClosed.
// Either way Admit returns the error.
//
// # Adaptive limit (optional)
//
// Adaptive is a separate Admitter, off unless built with NewAdaptive, whose
// cap is learnt from latency (gradient style): it grows while latency stays
// near its long-run level and shrinks when latency rises. Limiter never uses
// it; put it in the chain yourself if you want it.
package concurrency

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults.
const (
	// DefaultRetryAfter is the RetryAfter of a deny.
	DefaultRetryAfter = 100 * time.Millisecond
	// DefaultPolicy is the global cap's policy name.
	DefaultPolicy = "concurrency"
	// DefaultMaxKeys is a per-key cap's MaxKeys when it is 0.
	DefaultMaxKeys = 10_000
	// MaxPerKeyCaps is the most per-key caps (and, separately, fleet
	// per-key caps) one Limiter holds; it keeps Admit free of allocations.
	MaxPerKeyCaps = 8
)

// ErrTooManyKeys is returned with a deny when a per-key cap already tracks
// MaxKeys keys and the request's key is a new one.
var ErrTooManyKeys = errors.New("concurrency: per-key cap tracks its maximum number of keys; new key denied")

// KeyFunc computes the key a per-key cap counts a request under. ok false
// means the cap does not apply to r (for example another method). The
// empty string is a valid key: every request that maps to it shares one
// count. It must be fast and, to keep Admit allocation-free, should return
// a string that already exists (a field of r) rather than build one.
type KeyFunc func(r *floodgate.Request) (key string, ok bool)

// PerKey configures a per-key cap on this instance.
type PerKey struct {
	// Name is the cap's policy name, reported in Decisions. Required; it
	// must not contain ':'.
	Name string
	// Cap is the most requests in flight per key (>= 1).
	Cap int64
	// Key computes the key. Required.
	Key KeyFunc
	// MaxKeys bounds the number of keys tracked at once (0: DefaultMaxKeys).
	MaxKeys int
}

// Option configures New.
type Option func(*options)

type options struct {
	global     int64
	globalName string
	perKey     []PerKey
	fleet      []FleetPerKey
	retryAfter time.Duration
	clock      floodgate.Clock
	clockGiven bool
	instance   string
	errs       []error
}

func (o *options) fail(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf("concurrency: "+format, args...))
}

// WithGlobal caps the requests in flight on this instance at limit (>= 1),
// reported under the policy name "concurrency".
func WithGlobal(limit int64) Option {
	return func(o *options) {
		if limit < 1 {
			o.fail("global cap %d must be at least 1", limit)
		}
		o.global = limit
	}
}

// WithGlobalPolicy renames the global cap's policy (default "concurrency").
func WithGlobalPolicy(name string) Option {
	return func(o *options) {
		if name == "" {
			o.fail("global policy name is empty")
		}
		o.globalName = name
	}
}

// WithPerKey adds a per-key cap on this instance.
func WithPerKey(c PerKey) Option {
	return func(o *options) { o.perKey = append(o.perKey, c) }
}

// WithRetryAfter sets the RetryAfter of a deny (> 0; default 100ms).
func WithRetryAfter(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.fail("retry-after %s must be positive", d)
		}
		o.retryAfter = d
	}
}

// WithClock sets the Clock for fleet leases: the acquire script then takes
// now from it instead of Redis TIME, so tests can expire leases on fake
// time.
func WithClock(c floodgate.Clock) Option {
	return func(o *options) {
		if c == nil {
			o.fail("clock is nil")
		}
		o.clock, o.clockGiven = c, true
	}
}

// WithInstanceID sets the prefix of the request IDs this instance puts in
// Redis (default: 16 random hex digits). Live instances must not share one.
func WithInstanceID(id string) Option {
	return func(o *options) {
		if id == "" || len(id) > 200 {
			o.fail("instance ID %q must have 1 to 200 bytes", id)
		}
		o.instance = id
	}
}

// Limiter is the in-flight limiter, a floodgate.Admitter. It is safe for
// concurrent use. See the package documentation.
type Limiter struct {
	inflight      atomic.Int64
	global        int64
	globalName    string
	keys          []*keyLimit
	fleet         []*fleetLimit
	retryAfter    time.Duration
	releaseGlobal floodgate.Done
	tickets       sync.Pool // *ticket for local multi-key releases

	fleetState
}

var _ floodgate.Admitter = (*Limiter)(nil)

// New returns a Limiter with the given caps; at least one is required. It
// returns an error naming every bad option.
func New(opts ...Option) (*Limiter, error) {
	o := options{retryAfter: DefaultRetryAfter, globalName: DefaultPolicy, clock: floodgate.SystemClock}
	for _, opt := range opts {
		opt(&o)
	}
	errs := o.errs
	if o.global == 0 && len(o.perKey) == 0 && len(o.fleet) == 0 {
		errs = append(errs, errors.New("concurrency: no cap configured (use WithGlobal, WithPerKey or WithFleetPerKey)"))
	}
	if len(o.perKey) > MaxPerKeyCaps {
		errs = append(errs, fmt.Errorf("concurrency: %d per-key caps, at most %d", len(o.perKey), MaxPerKeyCaps))
	}
	if len(o.fleet) > MaxPerKeyCaps {
		errs = append(errs, fmt.Errorf("concurrency: %d fleet per-key caps, at most %d", len(o.fleet), MaxPerKeyCaps))
	}
	names := map[string]bool{}
	if o.global > 0 {
		names[o.globalName] = true
	}
	checkName := func(kind, name string) {
		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("concurrency: %s cap has no Name", kind))
		case strings.Contains(name, ":"):
			errs = append(errs, fmt.Errorf("concurrency: %s cap name %q contains ':'", kind, name))
		case names[name]:
			errs = append(errs, fmt.Errorf("concurrency: cap name %q is used twice", name))
		}
		names[name] = true
	}
	l := &Limiter{global: o.global, globalName: o.globalName, retryAfter: o.retryAfter}
	for _, c := range o.perKey {
		checkName("per-key", c.Name)
		if c.Cap < 1 {
			errs = append(errs, fmt.Errorf("concurrency: per-key cap %q: Cap %d must be at least 1", c.Name, c.Cap))
		}
		if c.Key == nil {
			errs = append(errs, fmt.Errorf("concurrency: per-key cap %q: Key is nil", c.Name))
		}
		if c.MaxKeys < 0 {
			errs = append(errs, fmt.Errorf("concurrency: per-key cap %q: MaxKeys %d is negative", c.Name, c.MaxKeys))
		}
		l.keys = append(l.keys, newKeyLimit(l, c))
	}
	for _, c := range o.fleet {
		checkName("fleet per-key", c.Name)
		fl, err := newFleetLimit(c)
		if err != nil {
			errs = append(errs, err)
		}
		l.fleet = append(l.fleet, fl)
	}
	if len(o.fleet) > 0 {
		if err := l.fleetState.init(o); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if l.global > 0 {
		l.releaseGlobal = func() { l.inflight.Add(-1) }
	}
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

// KeyInFlight returns the requests in flight on this instance for key under
// the per-key cap named name, and whether such a cap exists.
func (l *Limiter) KeyInFlight(name, key string) (int64, bool) {
	for _, k := range l.keys {
		if k.name == name {
			return k.count(key), true
		}
	}
	return 0, false
}

// Keys returns the number of keys the per-key cap named name tracks now
// (keys with requests in flight), and whether such a cap exists.
func (l *Limiter) Keys(name string) (int, bool) {
	for _, k := range l.keys {
		if k.name == name {
			return int(k.size.Load()), true
		}
	}
	return 0, false
}

// Tracked returns the number of entries the per-key cap named name holds in
// memory: keys in flight plus idle entries kept for reuse (at most 256), and
// whether such a cap exists.
func (l *Limiter) Tracked(name string) (int, bool) {
	for _, k := range l.keys {
		if k.name == name {
			return k.tracked(), true
		}
	}
	return 0, false
}

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

// Admit implements floodgate.Admitter.
func (l *Limiter) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	var b binding
	if l.global > 0 {
		for {
			n := l.inflight.Load()
			if n >= l.global {
				return l.deny(r, l.globalName, l.global, floodgate.SourceConcurrency), nil, nil
			}
			if l.inflight.CompareAndSwap(n, n+1) {
				b.offer(l.globalName, l.global, l.global-n-1)
				break
			}
		}
	}
	var (
		held  [MaxPerKeyCaps]*entry
		nheld int
	)
	for _, k := range l.keys {
		key, ok := k.key(r)
		if !ok {
			continue
		}
		e, n, err := k.acquire(key)
		if e == nil {
			l.releaseLocal(held[:nheld])
			return l.deny(r, k.name, k.cap, floodgate.SourceConcurrency), nil, err
		}
		held[nheld] = e
		nheld++
		b.offer(k.name, k.cap, k.cap-n)
	}
	if len(l.fleet) > 0 {
		return l.admitFleet(ctx, r, &b, held[:nheld])
	}
	return l.allow(r, &b, floodgate.SourceConcurrency), l.localDone(held[:nheld]), nil
}

// releaseLocal releases local entries and the global slot.
func (l *Limiter) releaseLocal(held []*entry) {
	for i := len(held) - 1; i >= 0; i-- {
		held[i].kl.release(held[i])
	}
	if l.global > 0 {
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

func (t *ticket) releaseLocal() {
	l := t.l
	l.releaseLocal(t.entries[:t.n])
	clear(t.entries[:t.n])
	t.n = 0
	l.tickets.Put(t)
}

// keyLimit is one per-key cap on this instance: sharded maps of key ->
// entry, entries deleted at count 0 and recycled.
type keyLimit struct {
	l       *Limiter
	name    string
	cap     int64
	key     KeyFunc
	maxKeys int64
	size    atomic.Int64
	seed    maphash.Seed
	shards  [numShards]shard
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
	maxKeys := int64(c.MaxKeys)
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	k := &keyLimit{l: l, name: c.Name, cap: c.Cap, key: c.Key, maxKeys: maxKeys, seed: maphash.MakeSeed()}
	for i := range k.shards {
		k.shards[i].m = make(map[string]*entry)
	}
	return k
}

func (k *keyLimit) shardOf(key string) *shard {
	return &k.shards[maphash.String(k.seed, key)%numShards]
}

// acquire takes a slot for key. It returns the entry and the count after
// taking it, or a nil entry with the current count (and ErrTooManyKeys when
// the key table is full).
func (k *keyLimit) acquire(key string) (*entry, int64, error) {
	sh := k.shardOf(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil || e.n == 0 { // a new or idle key becomes active
		if k.size.Add(1) > k.maxKeys {
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
	if e.n >= k.cap {
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
	e.releaseAll = func() {
		k.release(e)
		if l.global > 0 {
			l.inflight.Add(-1)
		}
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

func (k *keyLimit) count(key string) int64 {
	sh := k.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[key]; e != nil {
		return e.n
	}
	return 0
}

// tracked returns the number of entries in the maps, active and idle.
func (k *keyLimit) tracked() int {
	total := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		total += len(sh.m)
		sh.mu.Unlock()
	}
	return total
}
