package tiers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Several requests decided as one (issue 20): a gateway's rate-limit call
// (Envoy's ShouldRateLimit) carries several descriptors, each limited by
// its own rule and identity, and they pass or fail together. AdmitMany
// resolves each item as Admit resolves a request, merges the buckets
// they share, and charges them all in one Store.Take.

// Item is one request of AdmitMany.
type Item struct {
	// Request is resolved as Admit resolves it: its method, identity,
	// tier, headers and cost select the rules and build the keys. It
	// must not be nil, and AdmitMany does not keep it.
	Request *floodgate.Request
	// Rule, when not empty, limits the item to the policy's rule of that
	// name: the item is charged at that rule alone, when the rule applies
	// to the request (its match, and the identity its key needs). Empty
	// means every rule the request matches, as Admit. A name the policy
	// in force does not have is an error (ErrUnknownRule).
	Rule string
	// Peek decides the item's buckets without charging them: each is
	// taken with cost 0, whatever the rule's or the request's cost (a
	// bucket then denies only when it is in debt).
	Peek bool
}

// MaxItems is the most items one AdmitMany call decides.
const MaxItems = 256

// ErrUnknownRule is wrapped by the error AdmitMany returns for an Item
// whose Rule the policy in force does not have.
var ErrUnknownRule = errors.New("tiers: no rule of the policy in force has that name")

// AdmitMany decides several requests together, all or nothing: every
// bucket of every item is charged in one Store.Take if and only if all of
// them allow, so a request denied at one item charges nothing at any
// other. It writes each item's own decision into out (len(out) >=
// len(items)) and returns the decision of the whole.
//
// Each item is resolved as Admit resolves a request (see Item for Rule
// and Peek), and the policy's address lists apply to it: an item whose
// client address is exempt charges nothing (out: Policy "exempt"), one in
// the deny list denies the whole call before anything is charged. Items
// that resolve to the same bucket (the same rule and identity) share it:
// the bucket is charged the sum of their costs, once, with the first
// such item's limit. Shadow rules are charged in a second Take, only when
// the first allowed, exactly as Admit does; rules with max_wait are
// decided without waiting (AdmitMany never holds a caller), and rules that
// settle keep their charge at admission (AdmitMany returns no Done).
//
// out[i] describes item i alone: Allowed is whether its own buckets admit
// it (so in a denied call the items that did not deny are allowed, and
// were charged nothing); its binding bucket is chosen as Admit chooses
// one; Skipped names the rules it lacked the identity for. An item whose
// buckets were never taken (only shadow rules, in a call the real rules
// denied) has the allowed decision with no Policy, as has an item no rule
// applies to. The returned decision binds over every item: on a deny the
// denying bucket with the longest RetryAfter, on an allow the bucket with
// the least Remaining, or a shadow rule's would-be denial (Shadow set),
// as Admit reports it. Decisions of AdmitMany carry no Quotas.
//
// When the store fails, every bucket is decided by its rule's
// on_store_error (DecideUnavailable), and the error is returned, wrapped.
// A cost above a rule's capacity denies with RetryAfter 0 and an error
// wrapping ErrCostExceedsCapacity. A negative Request.Cost, an unknown
// Rule, a nil Request or more than MaxItems items deny the call without
// charging anything, with an error.
func (l *Limiter) AdmitMany(ctx context.Context, items []Item, out []floodgate.Decision) (floodgate.Decision, error) {
	deny := floodgate.Decision{Stage: floodgate.StageTiers}
	switch {
	case len(out) < len(items):
		return deny, fmt.Errorf("tiers: AdmitMany: out has room for %d decisions, want one per item (%d)", len(out), len(items))
	case len(items) > MaxItems:
		return deny, fmt.Errorf("tiers: AdmitMany: %d items; at most %d", len(items), MaxItems)
	}
	c := l.state.Load()
	ms := manyPool.Get().(*manyScratch)
	defer ms.release()
	ms.items = ms.items[:0]
	for i := range items {
		it := &items[i]
		if it.Request == nil {
			return deny, fmt.Errorf("tiers: AdmitMany: items[%d].Request is nil", i)
		}
		rule := int32(-1)
		if it.Rule != "" {
			k, ok := c.ruleIndex(it.Rule)
			if !ok {
				return deny, fmt.Errorf("%w: items[%d].Rule %q", ErrUnknownRule, i, it.Rule)
			}
			rule = k
		}
		ms.items = append(ms.items, manyItem{req: it.Request, rule: rule, peek: it.Peek})
	}
	return l.admitMany(ctx, c, ms, out)
}

// ruleIndex returns the index in c.rules of the rule named name.
func (c *compiled) ruleIndex(name string) (int32, bool) {
	if c.rls != nil && c.rls.ruleIndex != nil {
		k, ok := c.rls.ruleIndex[name]
		return k, ok
	}
	for i := range c.rules {
		if c.rules[i].name == name {
			return int32(i), true
		}
	}
	return 0, false
}

// manyItem is one item of a decision over several requests: its request,
// the one rule it is limited to (-1: every rule it matches) and whether
// it only peeks.
type manyItem struct {
	req  *floodgate.Request
	rule int32
	peek bool
}

// manyScratch holds what one AdmitMany call needs; pooled.
type manyScratch struct {
	items []manyItem
	// all are the merged buckets of every item, metas their rules (rule
	// indices in compiled.rules), owner the first item of each, res the
	// results and taken whether a take decided it.
	all   []quota.Bucket
	metas []meta
	owner []int32
	res   []quota.Result
	taken []bool
	// refs lists, item by item, the indices in all of the item's buckets:
	// item k's are refs[ends[k-1]:ends[k]].
	refs []int32
	ends []int32
	// bound is each item's binding bucket (an index in all), or -1.
	bound []int32
	// index finds a merged bucket by key once there are many.
	index map[mergeKey]int32
	// part, partIdx and partRes are one take's buckets, their indices in
	// all, and its results.
	part    []quota.Bucket
	partIdx []int32
	partRes []quota.Result
	// req is the request AdmitDescriptors builds for each descriptor, and
	// hdrs their headers.
	req  []floodgate.Request
	hdrs []floodgate.Header
	// targets, idx and dec are AdmitDescriptors' per descriptor: its
	// target rule, its item and the item's decision (pooled rather than
	// on the stack: 64 Decisions are 10 KB, which the goroutine's stack
	// would grow for on every call).
	targets []*rlsTarget
	idx     []int32
	dec     []floodgate.Decision
}

var manyPool = sync.Pool{New: func() any { return new(manyScratch) }}

// linearMerge is the number of merged buckets up to which a bucket's twin
// is found by scanning, beyond which by the index map.
const linearMerge = 16

func (ms *manyScratch) release() {
	if cap(ms.all) > 4*MaxItems {
		return // an unusually large call: let it go
	}
	clear(ms.all)
	clear(ms.part)
	clear(ms.items)
	clear(ms.req)
	clear(ms.hdrs)
	clear(ms.targets)
	clear(ms.dec)
	if ms.index != nil {
		clear(ms.index)
	}
	manyPool.Put(ms)
}

// add merges bucket b of item k (meta m) into ms.all and returns its
// index there. Items merge only with items of the same key that are
// enforced alike: a rule's roll-out share (enforce_percent) follows each
// request's identity, not the key, so one key may be enforced for one item
// and shadow for another (a rule without key), and each is charged in its
// own take.
func (ms *manyScratch) add(b *quota.Bucket, m meta, k int32) int32 {
	if i, ok := ms.find(b.Key, m.shadow); ok {
		mb := &ms.all[i]
		mb.Cost = satAdd(mb.Cost, b.Cost)
		return i
	}
	i := int32(len(ms.all))
	ms.all = append(ms.all, *b)
	m.start, m.end, m.fromRequest = -1, -1, false
	ms.metas = append(ms.metas, m)
	ms.owner = append(ms.owner, k)
	if len(ms.all) > linearMerge {
		if ms.index == nil {
			ms.index = make(map[mergeKey]int32, 2*linearMerge)
		}
		if len(ms.index) == 0 {
			for j := range ms.all {
				ms.index[mergeKey{ms.all[j].Key, ms.metas[j].shadow}] = int32(j)
			}
		} else {
			ms.index[mergeKey{b.Key, m.shadow}] = i
		}
	}
	return i
}

// mergeKey is what items merge on: the bucket's key and whether it is
// charged as shadow (see add).
type mergeKey struct {
	key    string
	shadow bool
}

func (ms *manyScratch) find(key string, shadow bool) (int32, bool) {
	if len(ms.all) > linearMerge {
		i, ok := ms.index[mergeKey{key, shadow}]
		return i, ok
	}
	for i := range ms.all {
		if ms.all[i].Key == key && ms.metas[i].shadow == shadow {
			return int32(i), true
		}
	}
	return 0, false
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// admitMany decides ms.items under c; see AdmitMany.
func (l *Limiter) admitMany(ctx context.Context, c *compiled, ms *manyScratch, out []floodgate.Decision) (floodgate.Decision, error) {
	ms.all, ms.metas, ms.owner = ms.all[:0], ms.metas[:0], ms.owner[:0]
	ms.refs, ms.ends = ms.refs[:0], ms.ends[:0]
	ms.bound = grow(ms.bound, len(ms.items))
	for k := range ms.bound {
		ms.bound[k] = -1
	}
	if ms.index != nil {
		clear(ms.index)
	}
	var (
		refused    = -1 // an item that denies the whole call before any take
		refusedErr error
		errs       []error
	)
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	for k := range ms.items {
		it := &ms.items[k]
		r := it.req
		out[k] = floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Priority: r.Priority}
		if r.Cost < 0 {
			out[k].Allowed = false
			if refused < 0 {
				refused, refusedErr = k, fmt.Errorf("%w: %d for %s (items[%d])", ErrInvalidCost, r.Cost, r.Method, k)
			}
			ms.ends = append(ms.ends, int32(len(ms.refs)))
			continue
		}
		if denied, listed := c.listed(r); listed {
			d := &out[k]
			d.Source, d.Policy = floodgate.SourcePolicy, PolicyExempt
			if denied {
				d.Policy, d.HideQuota = PolicyDeny, true
				if c.shadow {
					d.Shadow = true
				} else {
					d.Allowed = false
					if refused < 0 {
						refused = k
					}
				}
			}
			ms.ends = append(ms.ends, int32(len(ms.refs)))
			continue
		}
		rc, off := c, int32(0)
		var one compiled
		if it.rule >= 0 {
			one = *c
			one.rules = c.rules[it.rule : it.rule+1]
			rc, off = &one, it.rule
		}
		sc.resolve(rc, r)
		sc.setKeys()
		out[k].Skipped = sc.skippedNames(rc)
		for j := range sc.metas {
			b := &sc.all[j]
			if it.peek {
				b.Cost = 0
			}
			b.MaxWait = 0 // never held: decided at once
			m := sc.metas[j]
			m.rule += off
			ms.refs = append(ms.refs, ms.add(b, m, int32(k)))
		}
		ms.ends = append(ms.ends, int32(len(ms.refs)))
	}
	if refused >= 0 {
		return out[refused], refusedErr
	}
	n := len(ms.all)
	ms.res = grow(ms.res, n)
	ms.taken = grow(ms.taken, n)
	clear(ms.res)
	clear(ms.taken)

	// The real buckets, then, only if they allowed, the shadow ones.
	allowed, err := ms.take(ctx, l.store, false)
	if err != nil {
		errs = append(errs, fmt.Errorf("tiers: store failed, deciding by on_store_error: %w", err))
	}
	if allowed {
		if _, err := ms.take(ctx, l.store, true); err != nil {
			errs = append(errs, fmt.Errorf("tiers: shadow rules not decided: %w", err))
		}
	}

	// Each item's decision, and the binding bucket of the whole.
	for k := range ms.items {
		if out[k].Policy != "" { // exempt, or a shadow deny-list decision
			continue
		}
		refs := ms.itemRefs(k)
		br, bs := ms.bind(refs, false), ms.bind(refs, true)
		switch {
		case br >= 0 && !ms.res[br].Allowed:
			ms.bound[k] = br
			if ms.res[br].RetryAfter == quota.Never {
				errs = append(errs, fmt.Errorf("%w: rule %q, cost %d (items[%d])", ErrCostExceedsCapacity, ms.all[br].Rule, ms.all[br].Cost, k))
			}
		case bs >= 0 && !ms.res[bs].Allowed:
			ms.bound[k] = bs
		case br >= 0:
			ms.bound[k] = br
		}
		if b := ms.bound[k]; b >= 0 {
			out[k] = ms.decision(c, b, out[k])
		}
	}
	bestReal, bestShadow := int32(-1), int32(-1)
	for i := range ms.all {
		if !ms.taken[i] {
			continue
		}
		if ms.metas[i].shadow {
			if !ms.res[i].Allowed && (bestShadow < 0 || later(ms.res[i].RetryAfter, ms.res[bestShadow].RetryAfter)) {
				bestShadow = int32(i)
			}
			continue
		}
		if bestReal < 0 || better(&ms.res[i], &ms.res[bestReal], allowed) {
			bestReal = int32(i)
		}
	}
	d := floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}
	if len(ms.items) > 0 {
		d.Priority = ms.items[0].req.Priority
	}
	switch {
	case bestReal >= 0 && !allowed:
		d = ms.decision(c, bestReal, d)
	case bestShadow >= 0:
		d = ms.decision(c, bestShadow, d)
	case bestReal >= 0:
		d = ms.decision(c, bestReal, d)
	}
	d.Skipped = ""
	if !allowed { // also a store that denied with every bucket allowing
		d.Allowed = false
	}
	return d, errors.Join(errs...)
}

// grow returns s with length n, reallocated when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// itemRefs returns the indices in ms.all of item k's buckets.
func (ms *manyScratch) itemRefs(k int) []int32 {
	start := int32(0)
	if k > 0 {
		start = ms.ends[k-1]
	}
	return ms.refs[start:ms.ends[k]]
}

// take charges the real (shadow false) or shadow buckets in one Take and
// records their results. With none to take it allows. On a store error the
// real buckets are decided by their on_store_error, and the shadow ones
// stay undecided.
func (ms *manyScratch) take(ctx context.Context, store quota.Store, shadow bool) (bool, error) {
	ms.part, ms.partIdx = ms.part[:0], ms.partIdx[:0]
	for i := range ms.all {
		if ms.metas[i].shadow == shadow {
			ms.part = append(ms.part, ms.all[i])
			ms.partIdx = append(ms.partIdx, int32(i))
		}
	}
	if len(ms.part) == 0 {
		return true, nil
	}
	ms.partRes = grow(ms.partRes, len(ms.part))
	clear(ms.partRes)
	allowed, err := store.Take(ctx, ms.part, ms.partRes)
	if err != nil {
		if shadow {
			return false, err
		}
		allowed = quota.DecideUnavailable(ms.part, ms.partRes, nil)
	}
	for j, i := range ms.partIdx {
		ms.res[i], ms.taken[i] = ms.partRes[j], true
	}
	return allowed, err
}

// bind returns the binding bucket among refs of the real (shadow false)
// or shadow buckets that a take decided, or -1: the denying one with the
// longest RetryAfter, else the one with the least Remaining, ties to the
// earliest (the most specific rule of the item).
func (ms *manyScratch) bind(refs []int32, shadow bool) int32 {
	best := int32(-1)
	allowed := true
	for _, i := range refs {
		if ms.taken[i] && ms.metas[i].shadow == shadow && !ms.res[i].Allowed {
			allowed = false
			break
		}
	}
	for _, i := range refs {
		if !ms.taken[i] || ms.metas[i].shadow != shadow {
			continue
		}
		if best < 0 || better(&ms.res[i], &ms.res[best], allowed) {
			best = i
		}
	}
	return best
}

// better reports whether result a binds rather than b: on an allow the
// one with less Remaining, on a deny a denying one with a longer
// RetryAfter.
func better(a, b *quota.Result, allowed bool) bool {
	if allowed {
		return a.Remaining < b.Remaining
	}
	if a.Allowed {
		return false
	}
	if b.Allowed {
		return true
	}
	return later(a.RetryAfter, b.RetryAfter)
}

// decision describes merged bucket i, over base (which holds the item's
// Skipped and Priority): Allowed is the bucket's own result, or, for a
// shadow rule, true with Shadow set when it would deny.
func (ms *manyScratch) decision(c *compiled, i int32, base floodgate.Decision) floodgate.Decision {
	m := &ms.metas[i]
	cr := &c.rules[m.rule]
	res := ms.res[i]
	req := ms.items[ms.owner[i]].req
	d := decision(req, cr, m, &ms.all[i], res, m.shadow && !res.Allowed)
	d.Allowed = res.Allowed || m.shadow
	d.Priority, d.Skipped = base.Priority, base.Skipped
	if d.Shadow || d.RetryAfter < 0 { // Never: waiting cannot cure it
		d.RetryAfter = 0
	}
	return d
}
