package tiers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reqctx"
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

	// sh is what settlement and waiting need.
	sh shaper
}

// Option configures a Limiter.
type Option func(*limiterConfig)

type limiterConfig struct {
	prefix string
	sh     shaperConfig
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
	// Calendar windows are computed on the Limiter's clock.
	c.setClock(l.sh.clock)
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
	sc.all, sc.metas = sc.all[:0], sc.metas[:0]
	sc.resolve(c, r, 0, len(c.rules))
	sc.setKeys(0)
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
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.items = append(sc.items[:0], callItem{req: r, rule: -1})
	if c.meterEst {
		_, _, sc.est = reqctx.Costs(ctx) // the meters' estimates
	}
	var out [1]floodgate.Decision
	done, err := l.run(ctx, c, sc, out[:], &out[0], call{single: true, hold: true})
	return out[0], done, err
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
