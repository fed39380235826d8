package tiers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// ErrCostExceedsCapacity is wrapped by the error Admit returns when a
// request's cost (Request.Cost, or a rule's own cost) is
// larger than a matching rule's capacity. Waiting cannot cure it: the
// request is denied with RetryAfter 0 and the store is not called.
var ErrCostExceedsCapacity = errors.New("tiers: request cost exceeds the rule's capacity")

// ErrInvalidCost is wrapped by the error Admit returns for a request whose
// Cost is negative; the request is denied without calling the store.
var ErrInvalidCost = errors.New("tiers: request cost is negative")

// Limiter is the rate-limit stage: a floodgate.Admitter that charges every
// rule a request matches in one Store.Take. It is safe for concurrent use;
// SetPolicy swaps the policy atomically under load.
type Limiter struct {
	store  quota.Store
	prefix string
	state  atomic.Pointer[compiled]
	pool   sync.Pool

	// mu serialises policy swaps with scope declarations (see
	// RequireScopes), so every policy in force has been checked against
	// every declaration.
	mu     sync.Mutex
	scopes []*scopeDecl

	// sh is what settlement and waiting need (shaping.go).
	sh shaper
}

// Option configures a Limiter.
type Option func(*limiterConfig)

type limiterConfig struct {
	prefix string
	sh     shaperConfig // shaping.go
	errs   []error
}

// WithKeyPrefix sets the prefix of every bucket key (default "fg:"), so
// several applications can share one Redis. It must be at most 64 bytes of
// [A-Za-z0-9._:-].
func WithKeyPrefix(prefix string) Option {
	return func(c *limiterConfig) {
		if !validKeyPrefix(prefix) {
			c.errs = append(c.errs, fmt.Errorf("tiers: WithKeyPrefix: %w: got %q", ErrKeyPrefix, prefix))
			return
		}
		c.prefix = prefix
	}
}

// NewLimiter returns a Limiter deciding with policy over store. The policy
// is validated; a bad one is reported as a *PolicyError.
func NewLimiter(store quota.Store, policy *Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("tiers: NewLimiter: store is nil")
	}
	if policy == nil {
		return nil, errors.New("tiers: NewLimiter: policy is nil")
	}
	cfg := limiterConfig{prefix: defaultKeyPrefix}
	for _, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, errors.New("tiers: nil Option"))
			continue
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	l := &Limiter{store: store, prefix: cfg.prefix}
	l.sh.init(store, cfg.sh)
	l.pool.New = func() any { return newScratch() }
	if err := l.SetPolicy(policy); err != nil {
		return nil, err
	}
	return l, nil
}

// SetPolicy validates p and, if it is valid, makes it the policy in force
// for every later Admit. A bad policy is reported as a *PolicyError and the
// current one stays in force. So does a policy with a rule that a strict
// scope declaration (RequireScopes) says can never apply.
func (l *Limiter) SetPolicy(p *Policy) error {
	c, err := compile(p, l.prefix, nil)
	if err != nil {
		return err
	}
	if err := l.sh.check(c); err != nil { // settle and max_wait need a Settler
		return err
	}
	if err := checkStore(l.store, c); err != nil { // leased and async need a local-first layer
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkScopes(c); err != nil {
		return err
	}
	warnLocalWithoutFallback(l.store, c)
	l.state.Store(c)
	return nil
}

// Policy returns the policy in force. It must not be modified.
func (l *Limiter) Policy() *Policy { return l.state.Load().policy }

// MethodOptions returns the methods: entry of the policy in force for
// method (an exact gRPC full method or HTTP route pattern) and whether it
// has one. Package interceptor finds this method on the stages it wraps
// and consults it first when it resolves a call's cost and priority, so
// the policy's methods follow reloads; the Limiter itself charges the
// resolved Request.Cost.
func (l *Limiter) MethodOptions(method string) (floodgate.MethodOptions, bool) {
	mo, ok := l.state.Load().methods[method]
	return mo, ok
}

// Buckets resolves r under the policy in force into the buckets Admit
// would charge, most specific first, appending them to dst: none for an
// address in the policy's exempt or deny list. Shadow rules' buckets are
// included; it is meant for tools and tests.
func (l *Limiter) Buckets(dst []quota.Bucket, r *floodgate.Request) []quota.Bucket {
	if r == nil {
		return dst
	}
	c := l.state.Load()
	if _, listed := c.listed(r); listed {
		return dst
	}
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.resolve(c, r)
	sc.setKeys()
	return append(dst, sc.all...)
}

// listed reports whether r's client address is in the policy's deny list
// (denied true) or exempt list; deny wins.
func (c *compiled) listed(r *floodgate.Request) (denied, listed bool) {
	if c.deny == nil && c.exempt == nil || !r.Identity.IP.IsValid() {
		return false, false
	}
	ip := normIP(r.Identity.IP)
	if c.deny.contains(ip) {
		return true, true
	}
	return false, c.exempt.contains(ip)
}

// meta is what Admit knows of one matched rule besides its bucket. It holds
// no pointers, so filling and discarding metas costs no write barriers.
type meta struct {
	rule        int32 // index in compiled.rules
	start, end  int32 // the bucket's key is buf[start:end]; start < 0: prebuilt
	fromRequest bool  // cost came from Request.Cost
	// issue 18 (windows, roll-out; see windows.go, rollout.go):
	multi  bool // one window of a limit with several: named "<rule>/<period>"
	shadow bool // decided as a shadow rule: Rule.Shadow, Policy.Shadow, or outside EnforcePercent
}

type scratch struct {
	kb    *keyBuilder
	buf   []byte
	metas []meta
	// all holds the bucket of every matched rule, parallel to metas.
	all []quota.Bucket
	// real and shadow, with the indices in all of their buckets, are
	// used when all mixes shadow and real rules or a rule is skipped.
	real      []quota.Bucket
	realIdx   []int32
	shadow    []quota.Bucket
	shadowIdx []int32
	res       []quota.Result
	// skipped are the rules (indices in compiled.rules) that matched but
	// lacked an identity component, and names the buffer their names are
	// joined in.
	skipped []int32
	names   []byte
	// charged is what the takes charged, kept for rules that settle or
	// wait (shaping.go).
	charged charges
}

func newScratch() *scratch {
	return &scratch{
		kb:    newKeyBuilder(),
		buf:   make([]byte, 0, 256),
		metas: make([]meta, 0, 8),
		all:   make([]quota.Bucket, 0, 8),
		res:   make([]quota.Result, 8),
	}
}

const maxPooledBuf = 64 << 10

// resolve fills sc.metas, sc.all (without the keys built in sc.buf: see
// setKeys) and sc.buf with the buckets r is charged to.
func (sc *scratch) resolve(c *compiled, r *floodgate.Request) {
	sc.buf = sc.buf[:0]
	sc.metas = sc.metas[:0]
	sc.all = sc.all[:0]
	sc.skipped = sc.skipped[:0]
	for i := range c.rules {
		cr := &c.rules[i]
		if !cr.applies(c, r) { // issue 18: method, headers, tier (match.go)
			continue
		}
		m := meta{rule: int32(i), start: -1, shadow: cr.shadow}
		cost := cr.cost
		if cost == 0 {
			cost, m.fromRequest = r.Cost, true
			if cost == 0 {
				cost, m.fromRequest = 1, false
			}
		}
		tl := &cr.limit
		known := false
		if cr.byTier {
			if t, ok := c.tiers[r.Tier]; ok {
				tl, known = &t, true
			} else {
				tl = &c.defaultTier
			}
		}
		if len(cr.key) == 0 {
			var k string
			switch {
			case !cr.byTier:
				k = cr.constKey
			case known:
				k = cr.tierKeys[r.Tier]
			default:
				k = cr.defaultKey
			}
			m.shadow = m.shadow || !cr.enforces(nil, r) // issue 18: roll-out
			m.multi = tl.more != nil
			sc.metas = append(sc.metas, m)
			sc.addBucket(k, tl.limit, cost, cr)
			if tl.more != nil { // issue 18: the other windows (windows.go)
				sc.addWindows(tl, m, cost, cr, 0, 0, cr.noKey)
			}
			continue
		}
		start := len(sc.buf)
		bodyStart := start + len(cr.prefix)
		sc.buf = append(sc.buf, cr.head...)
		var ok bool
		if sc.buf, ok = sc.kb.appendKeyValues(sc.buf, start, cr, r); !ok {
			sc.skipped = append(sc.skipped, int32(i))
			continue
		}
		bodyEnd := len(sc.buf)
		overridden := false
		if cr.overrides != nil {
			if o, has := cr.overrides[string(sc.buf[bodyStart:])]; has {
				tl, overridden = &o, true
			}
		}
		if !overridden && cr.cidrs != nil {
			if o := cr.matchCIDR(r); o != nil {
				tl = o
			}
		}
		m.shadow = m.shadow || !cr.enforces(sc.buf[bodyStart:bodyEnd], r) // issue 18: roll-out
		m.multi = tl.more != nil
		sc.buf = append(sc.buf, tl.suffix...)
		m.start, m.end = int32(start), int32(len(sc.buf))
		sc.metas = append(sc.metas, m)
		sc.addBucket("", tl.limit, cost, cr)
		if tl.more != nil { // issue 18: the other windows (windows.go)
			sc.addWindows(tl, m, cost, cr, start, bodyEnd, "")
		}
	}
}

// addBucket appends a bucket to sc.all field by field: appending a Bucket
// value copies it with a bulk write barrier whenever the GC is marking.
func (sc *scratch) addBucket(key string, l quota.Limit, cost int64, cr *cRule) {
	n := len(sc.all)
	if n == cap(sc.all) {
		sc.all = append(sc.all, quota.Bucket{})
	} else {
		sc.all = sc.all[:n+1]
	}
	b := &sc.all[n]
	b.Key = key
	b.Limit = l
	b.Cost = cost
	b.OnStoreError = cr.fail
	b.CacheDenials = cr.cache
	b.Rule = cr.name
	b.Consistency = cr.mode
	b.SyncInterval = cr.sync
	b.MaxWait = cr.shape.maxWait
}

// setKeys sets the keys built in sc.buf into sc.all, with at most one
// allocation for all of them (the store may keep the keys), none when the
// same keys were built recently.
func (sc *scratch) setKeys() {
	if len(sc.buf) == 0 {
		return
	}
	keys := recentKeys.get(sc.buf)
	for i := range sc.metas {
		if m := &sc.metas[i]; m.start >= 0 {
			sc.all[i].Key = keys[m.start:m.end]
		}
	}
}

// skippedNames returns the names of the rules resolve skipped, joined by
// commas. Joined names are interned in recentKeys, so requests that skip
// the same rules share one string instead of allocating one each.
func (sc *scratch) skippedNames(c *compiled) string {
	switch len(sc.skipped) {
	case 0:
		return ""
	case 1:
		return c.rules[sc.skipped[0]].name
	}
	sc.names = sc.names[:0]
	for i, k := range sc.skipped {
		if i > 0 {
			sc.names = append(sc.names, ',')
		}
		sc.names = append(sc.names, c.rules[k].name...)
	}
	return recentKeys.get(sc.names)
}

// Admit implements floodgate.Admitter. See the package doc for what it
// decides. It returns a Done only when a rule that settles (Rule.Settle)
// charged the request: the Done settles that charge with the request's
// actual cost. Otherwise the stage holds nothing once decided, and the
// path allocates nothing. A request a max_wait rule admits by booking
// units ahead waits inside Admit, bounded by max_wait and ctx.
func (l *Limiter) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	if r == nil {
		return floodgate.Decision{Stage: floodgate.StageTiers}, nil, errors.New("tiers: Admit: request is nil")
	}
	c := l.state.Load()
	if r.Cost < 0 {
		return floodgate.Decision{Stage: floodgate.StageTiers, Priority: r.Priority},
			nil, fmt.Errorf("%w: %d for %s", ErrInvalidCost, r.Cost, r.Method)
	}
	if denied, listed := c.listed(r); listed {
		d := floodgate.Decision{Allowed: !denied, Stage: floodgate.StageTiers, Source: floodgate.SourcePolicy, Policy: PolicyExempt, Priority: r.Priority}
		if denied {
			d.Policy, d.HideQuota = PolicyDeny, true
			if c.shadow { // issue 18: a shadow policy denies nothing
				d.Allowed, d.Shadow = true, true
			}
		}
		return d, nil, nil
	}
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.resolve(c, r)
	if c.shaping {
		sc.charged.reset()
	}
	d, err := l.decide(ctx, c, sc, r)
	d.Skipped = sc.skippedNames(c)
	if c.shaping && sc.charged.any() {
		// A rule settles or waits: wait for the units booked ahead, and
		// return the Done that settles (shaping.go).
		return l.shape(ctx, sc, d, err)
	}
	return d, nil, err
}

// decide charges the buckets resolve found.
func (l *Limiter) decide(ctx context.Context, c *compiled, sc *scratch, r *floodgate.Request) (floodgate.Decision, error) {
	if len(sc.metas) == 0 {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Priority: r.Priority}, nil
	}
	sc.setKeys()
	shadowDeny := -1
	split := false // some bucket is not charged with the real ones
	for i := range sc.metas {
		m := &sc.metas[i]
		cr := &c.rules[m.rule]
		b := &sc.all[i]
		if m.fromRequest && b.Cost > b.Limit.Capacity() {
			if !m.shadow {
				d := decision(r, cr, m, b, quota.Result{Limit: b.Limit.Capacity()}, false)
				return d, fmt.Errorf("%w: rule %q capacity %d, cost %d", ErrCostExceedsCapacity, cr.name, b.Limit.Capacity(), b.Cost)
			}
			if shadowDeny < 0 {
				shadowDeny = i
			}
			split = true
			continue
		}
		split = split || m.shadow
	}
	// Common case: every bucket is real and charged: Take sc.all as is
	// (nil indices mean the identity).
	real, realIdx := sc.all, []int32(nil)
	var (
		shadow    []quota.Bucket
		shadowIdx []int32
	)
	if split {
		sc.real, sc.realIdx = sc.real[:0], sc.realIdx[:0]
		sc.shadow, sc.shadowIdx = sc.shadow[:0], sc.shadowIdx[:0]
		for i := range sc.metas {
			b := &sc.all[i]
			if sc.metas[i].fromRequest && b.Cost > b.Limit.Capacity() {
				continue
			}
			if sc.metas[i].shadow {
				sc.shadow = append(sc.shadow, *b)
				sc.shadowIdx = append(sc.shadowIdx, int32(i))
			} else {
				sc.real = append(sc.real, *b)
				sc.realIdx = append(sc.realIdx, int32(i))
			}
		}
		real, realIdx, shadow, shadowIdx = sc.real, sc.realIdx, sc.shadow, sc.shadowIdx
	}
	n := max(len(real), len(shadow))
	if cap(sc.res) < n {
		sc.res = make([]quota.Result, n)
	}
	res := sc.res[:n]

	var (
		d      floodgate.Decision
		haveD  bool
		errOut error
	)
	if len(real) > 0 {
		clear(res)
		if c.shaping {
			l.bookAhead(ctx, c, sc, real, realIdx) // waits: deadline and waiter cap (shaping.go)
		}
		allowed, err := l.store.Take(ctx, real, res[:len(real)])
		if err != nil {
			allowed = quota.DecideUnavailable(real, res[:len(real)], nil)
			d = bind(r, c, sc, realIdx, res[:len(real)], allowed)
			err = fmt.Errorf("tiers: store failed, deciding by on_store_error (%s by rule %q): %w", d.Source, d.Policy, err)
			if !d.Allowed {
				if d.RetryAfter < 0 {
					d.RetryAfter = 0
				}
				return d, err
			}
			errOut = err
			haveD = true
		} else {
			d = bind(r, c, sc, realIdx, res[:len(real)], allowed)
			if !allowed {
				if d.RetryAfter < 0 {
					d.RetryAfter = 0
					return d, fmt.Errorf("%w: rule %q", ErrCostExceedsCapacity, d.Policy)
				}
				return d, nil
			}
			haveD = true
			if c.shaping {
				sc.charged.note(c, sc, real, realIdx, res[:len(real)], false) // shaping.go
			}
		}
	}
	if shadowDeny >= 0 {
		b := &sc.all[shadowDeny]
		sd := decision(r, &c.rules[sc.metas[shadowDeny].rule], &sc.metas[shadowDeny], b, quota.Result{Limit: b.Limit.Capacity()}, true)
		return sd, errOut
	}
	if len(shadow) > 0 {
		clear(res)
		allowed, err := l.store.Take(ctx, shadow, res[:len(shadow)])
		if c.shaping && err == nil && allowed {
			sc.charged.note(c, sc, shadow, shadowIdx, res[:len(shadow)], true) // shaping.go
		}
		switch {
		case err != nil:
			errOut = errors.Join(errOut, fmt.Errorf("tiers: shadow rules not decided: %w", err))
		case !allowed:
			sd := bind(r, c, sc, shadowIdx, res[:len(shadow)], false)
			sd.Allowed, sd.Shadow, sd.RetryAfter = true, true, 0
			return sd, errOut
		case !haveD:
			// Only shadow rules matched and all allowed: nothing binds.
			return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Priority: r.Priority}, errOut
		}
	}
	return d, errOut
}

func (l *Limiter) release(sc *scratch) {
	if cap(sc.buf) > maxPooledBuf {
		return
	}
	// Only the used prefixes hold anything: every use starts from length
	// 0 of a scratch cleared this way, and the index slices hold no
	// pointers.
	clear(sc.all)
	clear(sc.real)
	clear(sc.shadow)
	l.pool.Put(sc)
}

// bind picks the binding bucket: on deny the denying one with the largest
// RetryAfter (Never largest), on allow the one with the least Remaining,
// ties going to the most specific (earliest).
// idx maps res to sc.all (nil: the identity).
func bind(r *floodgate.Request, c *compiled, sc *scratch, idx []int32, res []quota.Result, allowed bool) floodgate.Decision {
	best := -1
	for i := range res {
		if allowed {
			if best < 0 || res[i].Remaining < res[best].Remaining {
				best = i
			}
			continue
		}
		if res[i].Allowed {
			continue
		}
		if best < 0 || later(res[i].RetryAfter, res[best].RetryAfter) {
			best = i
		}
	}
	if best < 0 { // a store that denied with every bucket allowing: bind the first
		best = 0
	}
	k := best
	if idx != nil {
		k = int(idx[best])
	}
	d := decision(r, &c.rules[sc.metas[k].rule], &sc.metas[k], &sc.all[k], res[best], false)
	d.Allowed = allowed
	d.SetQuotas(sc.quotas(c, idx, res, best, allowed)) // issue 18: every window (windows.go)
	return d
}

func later(a, b time.Duration) bool {
	if b == quota.Never {
		return false
	}
	return a == quota.Never || a > b
}

func decision(r *floodgate.Request, cr *cRule, m *meta, b *quota.Bucket, res quota.Result, shadow bool) floodgate.Decision {
	src := res.Source
	if src == "" {
		src = floodgate.SourceStore
	}
	d := floodgate.Decision{
		Allowed:    shadow,
		Stage:      floodgate.StageTiers,
		Source:     src,
		Policy:     cr.policyName(m, b), // issue 18: "<rule>/<period>" for a window of several
		Limit:      res.Limit,
		Window:     b.Limit.Period,
		Remaining:  res.Remaining,
		Reset:      res.Reset,
		RetryAfter: res.RetryAfter,
		HideQuota:  cr.hide,
		Shadow:     shadow,
		Priority:   r.Priority,
	}
	if shadow {
		d.RetryAfter = 0
	}
	return d
}

// unavailableDecider is implemented by stores that never report a failure
// of their backend to the Limiter: package fallback decides every bucket
// by its OnStoreError itself, and package memstore has no backend to lose.
type unavailableDecider interface {
	DecidesOnStoreError() bool
}

// warnLocalWithoutFallback logs, once per rule of p, that a rule with
// on_store_error "local" cannot be honoured by store: when store fails,
// such a rule fails open.
func warnLocalWithoutFallback(store quota.Store, c *compiled) {
	if decidesOnStoreError(store) {
		return
	}
	for i := range c.rules {
		if cr := &c.rules[i]; cr.fail == quota.FailLocal {
			slog.Warn("floodgate: rule has on_store_error local, but the store has no local fallback (wrap it with fallback.New); when the store fails, the rule fails open",
				"rule", cr.name)
		}
	}
}
