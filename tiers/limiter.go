package tiers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// ErrCostExceedsCapacity is wrapped by the error Admit returns when a
// request's cost (annotated on the request or in the policy's methods) is
// larger than a matching rule's capacity. Waiting cannot cure it: the
// request is denied with RetryAfter 0 and the store is not called.
var ErrCostExceedsCapacity = errors.New("tiers: request cost exceeds the rule's capacity")

// ErrInvalidCost is wrapped by the error Admit returns for a request whose
// Cost is negative; the request is denied without calling the store.
var ErrInvalidCost = errors.New("tiers: request cost is negative")

// StoreErrorRetryAfter is the RetryAfter of a deny decided by a rule with
// on_store_error "closed" because the store could not answer.
const StoreErrorRetryAfter = time.Second

// Limiter is the rate-limit stage: a floodgate.Admitter that charges every
// rule a request matches in one Store.Take. It is safe for concurrent use;
// SetPolicy swaps the policy atomically under load.
type Limiter struct {
	store  Store
	prefix string
	state  atomic.Pointer[compiled]
	pool   sync.Pool
}

// Option configures a Limiter.
type Option func(*limiterConfig) error

type limiterConfig struct {
	prefix string
}

// WithKeyPrefix sets the prefix of every bucket key (default "fg:"), so
// several applications can share one Redis. It must be at most 64 bytes of
// [A-Za-z0-9._:-].
func WithKeyPrefix(prefix string) Option {
	return func(c *limiterConfig) error {
		if !validKeyPrefix(prefix) {
			return fmt.Errorf("%w: got %q", ErrKeyPrefix, prefix)
		}
		c.prefix = prefix
		return nil
	}
}

// NewLimiter returns a Limiter deciding with policy over store. The policy
// is validated; a bad one is reported as a *PolicyError.
func NewLimiter(store Store, policy *Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("tiers: NewLimiter: store is nil")
	}
	if policy == nil {
		return nil, errors.New("tiers: NewLimiter: policy is nil")
	}
	cfg := limiterConfig{prefix: defaultKeyPrefix}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("tiers: NewLimiter: nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	l := &Limiter{store: store, prefix: cfg.prefix}
	l.pool.New = func() any { return newScratch() }
	if err := l.SetPolicy(policy); err != nil {
		return nil, err
	}
	return l, nil
}

// SetPolicy validates p and, if it is valid, makes it the policy in force
// for every later Admit. A bad policy is reported as a *PolicyError and the
// current one stays in force.
func (l *Limiter) SetPolicy(p *Policy) error {
	c, err := compile(p, l.prefix, nil)
	if err != nil {
		return err
	}
	l.state.Store(c)
	return nil
}

// Policy returns the policy in force. It must not be modified.
func (l *Limiter) Policy() *Policy { return l.state.Load().policy }

// MethodOptions returns the policy's options for method (an exact gRPC
// full method or HTTP route pattern) and whether the policy has any.
// Transports use it for per-method cost and priority.
func (l *Limiter) MethodOptions(method string) (MethodOptions, bool) {
	mo, ok := l.state.Load().methods[method]
	return mo, ok
}

// MethodCostPriority is MethodOptions in the shape transports take: pass the
// method value to interceptor.WithMethodOptions so the policy's methods:
// section sets each method's cost and priority (follows reloads).
func (l *Limiter) MethodCostPriority(method string) (cost int64, p floodgate.Priority, ok bool) {
	mo, ok := l.state.Load().methods[method]
	return mo.Cost, mo.Priority, ok
}

// Buckets resolves r under the policy in force into the buckets Admit
// would charge, most specific first, appending them to dst. Shadow rules'
// buckets are included; it is meant for tools and tests.
func (l *Limiter) Buckets(dst []Bucket, r *floodgate.Request) []Bucket {
	if r == nil {
		return dst
	}
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	c := l.state.Load()
	sc.resolve(c, r)
	keys := string(sc.buf)
	for i := range sc.metas {
		m := &sc.metas[i]
		dst = append(dst, m.bucket(keys))
	}
	return dst
}

type meta struct {
	rule        *cRule
	constKey    string
	start, end  int
	limit       Limit
	cost        int64
	fromRequest bool // cost came from the request or the methods table
}

func (m *meta) bucket(keys string) Bucket {
	k := m.constKey
	if k == "" {
		k = keys[m.start:m.end]
	}
	return Bucket{Key: k, Limit: m.limit, Cost: m.cost, OnStoreError: m.rule.fail, CacheDenials: m.rule.cache}
}

type scratch struct {
	kb        *keyBuilder
	buf       []byte
	metas     []meta
	real      []Bucket
	realMeta  []*meta
	shadow    []Bucket
	shadowMet []*meta
	res       []Result
}

func newScratch() *scratch {
	return &scratch{
		kb:    newKeyBuilder(),
		buf:   make([]byte, 0, 256),
		metas: make([]meta, 0, 8),
		real:  make([]Bucket, 0, 8),
		res:   make([]Result, 8),
	}
}

const maxPooledBuf = 64 << 10

// resolve fills sc.metas and sc.buf with the buckets r is charged to.
func (sc *scratch) resolve(c *compiled, r *floodgate.Request) {
	sc.buf = sc.buf[:0]
	sc.metas = sc.metas[:0]
	id := identityView{user: r.Identity.User, apiKey: r.Identity.APIKey, tenant: r.Identity.Tenant, ip: r.Identity.IP}
	var methodCost int64
	var methodCostKnown bool
	for i := range c.rules {
		cr := &c.rules[i]
		if !cr.matches(r.Method) {
			continue
		}
		m := meta{rule: cr, cost: cr.cost}
		if m.cost == 0 {
			m.fromRequest = true
			switch {
			case r.Cost != 0:
				m.cost = r.Cost
			default:
				if !methodCostKnown {
					methodCost = c.methods[r.Method].Cost
					methodCostKnown = true
				}
				m.cost = methodCost
				if m.cost == 0 {
					m.cost, m.fromRequest = 1, false
				}
			}
		}
		tl := cr.limit
		known := false
		if cr.byTier {
			var t tierLimit
			if t, known = c.tiers[r.Tier]; known {
				tl = t
			} else {
				tl = c.defaultTier
			}
		}
		if len(cr.key) == 0 {
			switch {
			case !cr.byTier:
				m.constKey = cr.constKey
			case known:
				m.constKey = cr.tierKeys[r.Tier]
			default:
				m.constKey = cr.defaultKey
			}
			m.limit = tl.limit
			sc.metas = append(sc.metas, m)
			continue
		}
		m.start = len(sc.buf)
		sc.buf = append(sc.buf, cr.prefix...)
		bodyStart := len(sc.buf)
		var ok bool
		if sc.buf, ok = sc.kb.appendKeyBody(sc.buf, cr, r.Method, &id); !ok {
			sc.buf = sc.buf[:m.start]
			continue
		}
		if cr.overrides != nil {
			if o, has := cr.overrides[string(sc.buf[bodyStart:])]; has {
				tl = o
			}
		}
		sc.buf = append(sc.buf, tl.suffix...)
		m.end = len(sc.buf)
		m.limit = tl.limit
		sc.metas = append(sc.metas, m)
	}
}

// Admit implements floodgate.Admitter. See the package doc for what it
// decides. It never returns a Done: the stage holds nothing once decided.
func (l *Limiter) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	if r == nil {
		return floodgate.Decision{Stage: floodgate.StageTiers}, nil, errors.New("tiers: Admit: request is nil")
	}
	c := l.state.Load()
	if r.Cost < 0 {
		return floodgate.Decision{Stage: floodgate.StageTiers, Priority: r.Priority},
			nil, fmt.Errorf("%w: %d for %s", ErrInvalidCost, r.Cost, r.Method)
	}
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.resolve(c, r)
	if len(sc.metas) == 0 {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Priority: r.Priority}, nil, nil
	}
	var keys string
	if len(sc.buf) > 0 {
		keys = string(sc.buf)
	}
	sc.real, sc.realMeta = sc.real[:0], sc.realMeta[:0]
	sc.shadow, sc.shadowMet = sc.shadow[:0], sc.shadowMet[:0]
	var shadowDeny *meta
	for i := range sc.metas {
		m := &sc.metas[i]
		if m.fromRequest && m.cost > m.limit.Capacity() {
			if !m.rule.shadow {
				d := decision(r, m, Result{Limit: m.limit.Capacity()}, false)
				return d, nil, fmt.Errorf("%w: rule %q capacity %d, cost %d", ErrCostExceedsCapacity, m.rule.name, m.limit.Capacity(), m.cost)
			}
			if shadowDeny == nil {
				shadowDeny = m
			}
			continue
		}
		if m.rule.shadow {
			sc.shadow = append(sc.shadow, m.bucket(keys))
			sc.shadowMet = append(sc.shadowMet, m)
		} else {
			sc.real = append(sc.real, m.bucket(keys))
			sc.realMeta = append(sc.realMeta, m)
		}
	}
	n := max(len(sc.real), len(sc.shadow))
	if cap(sc.res) < n {
		sc.res = make([]Result, n)
	}
	res := sc.res[:n]

	var (
		d      floodgate.Decision
		haveD  bool
		errOut error
	)
	if len(sc.real) > 0 {
		clear(res)
		allowed, err := l.store.Take(ctx, sc.real, res[:len(sc.real)])
		if err != nil {
			d, err = storeFailure(r, sc.realMeta, err)
			if !d.Allowed {
				return d, nil, err
			}
			errOut = err
			haveD = true
		} else {
			d = bind(r, sc.realMeta, res[:len(sc.real)], allowed)
			if !allowed {
				if d.RetryAfter < 0 {
					d.RetryAfter = 0
					return d, nil, fmt.Errorf("%w: rule %q", ErrCostExceedsCapacity, d.Policy)
				}
				return d, nil, nil
			}
			haveD = true
		}
	}
	if shadowDeny != nil {
		sd := decision(r, shadowDeny, Result{Limit: shadowDeny.limit.Capacity()}, true)
		return sd, nil, errOut
	}
	if len(sc.shadow) > 0 {
		clear(res)
		allowed, err := l.store.Take(ctx, sc.shadow, res[:len(sc.shadow)])
		switch {
		case err != nil:
			errOut = errors.Join(errOut, fmt.Errorf("tiers: shadow rules not decided: %w", err))
		case !allowed:
			sd := bind(r, sc.shadowMet, res[:len(sc.shadow)], false)
			sd.Allowed, sd.Shadow, sd.RetryAfter = true, true, 0
			return sd, nil, errOut
		case !haveD:
			// Only shadow rules matched and all allowed: nothing binds.
			return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Priority: r.Priority}, nil, errOut
		}
	}
	return d, nil, errOut
}

func (l *Limiter) release(sc *scratch) {
	if cap(sc.buf) > maxPooledBuf {
		return
	}
	clear(sc.real[:cap(sc.real)])
	clear(sc.shadow[:cap(sc.shadow)])
	clear(sc.realMeta[:cap(sc.realMeta)])
	clear(sc.shadowMet[:cap(sc.shadowMet)])
	clear(sc.metas[:cap(sc.metas)])
	l.pool.Put(sc)
}

// bind picks the binding bucket: on deny the denying one with the largest
// RetryAfter (Never largest), on allow the one with the least Remaining,
// ties going to the most specific (earliest).
func bind(r *floodgate.Request, metas []*meta, res []Result, allowed bool) floodgate.Decision {
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
	d := decision(r, metas[best], res[best], false)
	d.Allowed = allowed
	return d
}

func later(a, b time.Duration) bool {
	if b == Never {
		return false
	}
	return a == Never || a > b
}

func decision(r *floodgate.Request, m *meta, res Result, shadow bool) floodgate.Decision {
	src := res.Source
	if src == "" {
		src = floodgate.SourceStore
	}
	d := floodgate.Decision{
		Allowed:    shadow,
		Stage:      floodgate.StageTiers,
		Source:     src,
		Policy:     m.rule.name,
		Limit:      res.Limit,
		Window:     m.limit.Period,
		Remaining:  res.Remaining,
		Reset:      res.Reset,
		RetryAfter: res.RetryAfter,
		HideQuota:  m.rule.hide,
		Shadow:     shadow,
		Priority:   r.Priority,
	}
	if shadow {
		d.RetryAfter = 0
	}
	return d
}

// storeFailure decides by the rules' fail modes when the store could not
// answer: any rule with on_store_error "closed" denies; otherwise the
// request is allowed. FailLocal needs a local limiter that only a fallback
// store (package fallback) has; without one it allows, and the returned
// error says so.
func storeFailure(r *floodgate.Request, metas []*meta, err error) (floodgate.Decision, error) {
	for _, m := range metas {
		if m.rule.fail == FailClosed {
			d := decision(r, m, Result{Limit: m.limit.Capacity(), RetryAfter: StoreErrorRetryAfter}, false)
			d.Source = floodgate.SourceFailClosed
			return d, fmt.Errorf("tiers: store failed, rule %q fails closed: %w", m.rule.name, err)
		}
	}
	m := metas[0]
	d := decision(r, m, Result{Limit: m.limit.Capacity()}, false)
	d.Allowed, d.Source = true, floodgate.SourceFailOpen
	return d, fmt.Errorf("tiers: store failed, allowing (wrap the store with package fallback for local limits): %w", err)
}
