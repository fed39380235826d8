package tiers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// The decision engine. Admit, AdmitMany and AdmitDescriptors are thin
// adapters over run, which decides the requests of one call:
//
//  1. gather: each request is checked (a negative cost refuses the call),
//     looked up in the policy's deny and exempt lists, and resolved into
//     the buckets of the rules it matches (or of the one rule its item
//     names); requests of the same call that resolve to the same bucket
//     share it, charged the sum of their costs.
//  2. overCapacity (a single request only): a cost from the request above
//     a rule's capacity is refused before the store is called; a shadow
//     rule's only reports that it would deny.
//  3. take: the enforced buckets are charged in one Store.Take and, only
//     if they allowed, the shadow buckets in a second (AdmitDescriptors
//     reads them, at a cost of 0, when they denied, and reads every
//     bucket of a call a deny mapping denies: peekTake); when the store
//     fails, the enforced buckets are decided by their rules'
//     on_store_error and the shadow ones stay undecided.
//  4. bindItems, bindCall: each request's binding bucket, and the call's;
//     errors: the store's failure, and a cost no wait can cure.
//  5. shape (a single request that may be held): it waits for the units
//     a max_wait rule booked ahead, and gets the Done that settles the
//     charges of rules that settle.

// call is what differs between the engine's callers.
type call struct {
	// single: the call is one request (Admit). Its decision is the
	// call's, and lists the windows of its binding rule (Quotas); a cost
	// from the request above a rule's capacity is refused before the store
	// is called; errors name the binding policy. Otherwise (AdmitMany,
	// AdmitDescriptors) the requests of the call may share buckets, whose
	// costs add up, and the store judges each sum against its capacity.
	single bool
	// hold: the caller may be held while units booked ahead by a rule with
	// max_wait come in, and gets a Done that settles the charges of rules
	// that settle. Otherwise every bucket is decided at once (MaxWait 0)
	// and its charge at admission stands.
	hold bool
	// read: every bucket is read (taken at a cost of 0, charging nothing)
	// and judged by the cost it would be charged (AdmitDescriptors, for
	// the other descriptors of a call a deny mapping denies).
	read bool
	// peekShadows: when the enforced take denies, the shadow buckets are
	// read and judged as with read, so a shadow rule that would deny
	// still says so (AdmitDescriptors).
	peekShadows bool
	// atMost: the single request asks for at most its cost (AdmitAtMost):
	// the buckets charged the request's cost are AtMost, share one grant,
	// and are never held; the shadow ones are charged the grant.
	atMost bool
}

// callItem is one request of a call: the request, the one rule it is
// limited to (-1: every rule it matches) and whether it only peeks.
type callItem struct {
	req  *floodgate.Request
	rule int32
	peek bool
	// empty: the scopes the request has with the empty value
	// (keyBuilder.empty).
	empty uint8
	// own, when not nil, is a gateway descriptor with a limit of its own
	// (Descriptor.Limit): the item's one bucket is that limit's, not a
	// rule's (rule is then unused).
	own *Descriptor
}

// run decides the requests in sc.items under c, writing each one's
// decision into out (len(out) >= len(sc.items)) and the call's into whole
// (for a single request, &out[0]); see the steps above. It returns, for a
// call that holds, the Done of a request whose rules settle.
func (l *Limiter) run(ctx context.Context, c *compiled, sc *scratch, out []floodgate.Decision, whole *floodgate.Decision, how call) (floodgate.Done, error) {
	sc.reset()
	if k, err := sc.gather(c, out, how); k >= 0 {
		*whole = out[k]
		return nil, err
	}
	sc.res = grow(sc.res, len(sc.all))
	sc.taken = grow(sc.taken, len(sc.all))
	clear(sc.res)
	clear(sc.taken)
	if how.atMost {
		sc.markAtMost()
	}
	if how.single && sc.costs && !how.atMost {
		if err := sc.overCapacity(c, &out[0]); err != nil {
			return nil, err // out[0], the call's decision, is the refusal
		}
	}
	hold := how.hold && c.shaping
	if hold {
		sc.charged.reset()
	}
	var allowed bool
	var realErr error
	if how.read {
		allowed, realErr = l.peekTake(ctx, c, sc, false)
	} else {
		allowed, realErr = l.take(ctx, c, sc, false, hold)
	}
	if sc.softs && !allowed && !sc.gone {
		allowed, realErr = l.soften(ctx, c, sc, realErr, hold, how.read)
	}
	shadowAllowed, shadowErr := !sc.over, error(nil)
	switch {
	case sc.over || !sc.shadows: // a shadow bucket over its capacity denies already
	case allowed && !how.read:
		if how.atMost {
			sc.grantShadows()
		}
		shadowAllowed, shadowErr = l.take(ctx, c, sc, true, hold)
	case how.read || how.peekShadows && realErr == nil:
		shadowAllowed, shadowErr = l.peekTake(ctx, c, sc, true)
	}
	sc.bindItems(c, out, allowed, shadowAllowed, how)
	if sc.softOver {
		sc.markSoft(c, out)
	}
	var err error
	if !how.single || !allowed || realErr != nil || shadowErr != nil {
		err = sc.errors(c, out, allowed, realErr, shadowErr, how)
	}
	if !how.single {
		sc.bindCall(c, allowed, whole)
		if sc.softOver && whole.Allowed {
			whole.SoftExceeded = sc.softNames(c, nil)
		}
		return nil, err
	}
	if b := sc.bound[0]; b >= 0 {
		if !sc.metas[b].shadow {
			whole.Allowed = allowed // the take's verdict
		}
		if !sc.metas[b].over {
			whole.SetQuotas(sc.quotas(c, int(b), allowed && !sc.metas[b].shadow))
		}
	}
	if hold && sc.charged.any() {
		d, done, err := l.shape(ctx, sc, *whole, err)
		*whole = d
		return done, err
	}
	return nil, err
}

// reset readies sc for a call over sc.items.
func (sc *scratch) reset() {
	sc.all, sc.metas = sc.all[:0], sc.metas[:0]
	sc.refs, sc.ends = sc.refs[:0], sc.ends[:0]
	sc.bound = grow(sc.bound, len(sc.items))
	for k := range sc.bound {
		sc.bound[k] = -1
	}
	if sc.index != nil {
		clear(sc.index)
	}
	sc.shadows, sc.costs, sc.over, sc.gone = false, false, false, false
	sc.softs, sc.softOver = false, false
}

// gather resolves every request of the call into sc.all and starts each
// one's decision in out. It returns the first request that refuses the
// whole call before anything is charged (a negative cost, an address in
// the deny list, a scope missing for a rule with when_missing deny), with
// the error it is refused with, or -1.
func (sc *scratch) gather(c *compiled, out []floodgate.Decision, how call) (refused int, err error) {
	refused = -1
	for k := range sc.items {
		r := sc.items[k].req
		d := &out[k]
		*d = floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Priority: r.Priority}
		switch denied, listed := c.listed(r); {
		case r.Cost < 0:
			d.Allowed = false
			if refused < 0 {
				refused, err = k, invalidCost(r, k, how)
			}
		case listed:
			d.Source, d.Policy = floodgate.SourcePolicy, PolicyExempt
			if denied {
				d.Policy, d.HideQuota = PolicyDeny, true
				if c.shadow { // a shadow policy denies nothing
					d.Shadow = true
				} else {
					d.Allowed = false
					if refused < 0 {
						refused = k
					}
				}
			}
		default:
			sc.resolveItem(c, k, d, how)
			if name, deny := sc.missingDenied(c, &sc.items[k]); deny {
				d.Allowed = false
				d.Source, d.Policy, d.HideQuota = floodgate.SourcePolicy, name, true
				if refused < 0 {
					refused = k
				}
			}
		}
		sc.ends = append(sc.ends, int32(len(sc.refs)))
	}
	return refused, err
}

// missingDenied returns the name of the first rule, among those the
// request of it skipped for a missing scope, that denies such requests
// (when_missing deny, not shadow).
func (sc *scratch) missingDenied(c *compiled, it *callItem) (string, bool) {
	if it.own != nil {
		return "", false
	}
	for _, i := range sc.skipped {
		if cr := &c.rules[i]; cr.missing == missingDeny && !cr.shadow {
			return cr.name, true
		}
	}
	return "", false
}

func invalidCost(r *floodgate.Request, k int, how call) error {
	if how.single {
		return fmt.Errorf("%w: %d for %s", ErrInvalidCost, r.Cost, r.Method)
	}
	return fmt.Errorf("%w: %d for %s (items[%d])", ErrInvalidCost, r.Cost, r.Method, k)
}

// resolveItem appends the buckets of item k to sc.all, merging each into
// a bucket of the call with the same key when the call has several
// requests, and records them in sc.refs.
func (sc *scratch) resolveItem(c *compiled, k int, d *floodgate.Decision, how call) {
	it := &sc.items[k]
	lo, hi := 0, len(c.rules)
	if it.rule >= 0 {
		lo, hi = int(it.rule), int(it.rule)+1
	}
	from := len(sc.all)
	switch {
	case it.own != nil && it.rule >= 0:
		sc.kb.empty = it.empty
		sc.resolveShared(c, it, from)
		sc.kb.empty = 0
	case it.own != nil:
		sc.resolveOwn(c, it)
	default:
		sc.kb.empty = it.empty
		sc.resolve(c, it.req, lo, hi)
		sc.kb.empty = 0
	}
	sc.setKeys(from)
	d.Skipped = sc.skippedNames(c)
	if how.single { // one request: no bucket to share; it does not peek, and may be held
		for j := from; j < len(sc.all); j++ {
			m := &sc.metas[j]
			sc.shadows = sc.shadows || m.shadow
			sc.softs = sc.softs || m.soft
			sc.costs = sc.costs || m.fromRequest
			sc.refs = append(sc.refs, int32(j))
		}
		return
	}
	n := from
	for j := from; j < len(sc.all); j++ {
		b, m := &sc.all[j], &sc.metas[j]
		if it.peek {
			b.Cost = 0
		}
		if !how.hold {
			b.MaxWait = 0 // never held: decided at once
		}
		if i, ok := sc.find(n, b.Key, m.shadow); ok {
			sc.all[i].Cost = satAdd(sc.all[i].Cost, b.Cost)
			sc.refs = append(sc.refs, i)
			continue
		}
		if n != j {
			sc.all[n], sc.metas[n] = *b, *m
		}
		sc.shadows = sc.shadows || m.shadow
		sc.softs = sc.softs || m.soft
		sc.refs = append(sc.refs, int32(n))
		n++
		sc.indexMerged(n)
	}
	clear(sc.all[n:])
	sc.all, sc.metas = sc.all[:n], sc.metas[:n]
}

// linearMerge is the number of merged buckets up to which a bucket's twin
// is found by scanning, beyond which by the index map.
const linearMerge = 16

// mergeKey is what the requests of a call share a bucket on: the bucket's
// key and whether it is charged as shadow. A rule's roll-out share
// (enforce_percent) follows each request's identity, not the key, so one
// key may be enforced for one request and shadow for another (a rule
// without key), and each is charged in its own take.
type mergeKey struct {
	key    string
	shadow bool
}

// find returns the index of the bucket among sc.all[:n] with key and
// shadow.
func (sc *scratch) find(n int, key string, shadow bool) (int32, bool) {
	if n > linearMerge {
		i, ok := sc.index[mergeKey{key, shadow}]
		return i, ok
	}
	for i := range n {
		if sc.all[i].Key == key && sc.metas[i].shadow == shadow {
			return int32(i), true
		}
	}
	return 0, false
}

// indexMerged indexes the new bucket sc.all[n-1], once there are more
// than linearMerge.
func (sc *scratch) indexMerged(n int) {
	if n <= linearMerge {
		return
	}
	if sc.index == nil {
		sc.index = make(map[mergeKey]int32, 2*linearMerge)
	}
	if len(sc.index) == 0 {
		for j := range n {
			sc.index[mergeKey{sc.all[j].Key, sc.metas[j].shadow}] = int32(j)
		}
		return
	}
	sc.index[mergeKey{sc.all[n-1].Key, sc.metas[n-1].shadow}] = int32(n - 1)
}

// overCapacity checks the cost a single request brings (Request.Cost)
// against each bucket's capacity; waiting cannot cure such a bucket. An
// enforced one refuses the request before anything is charged: its
// decision is written into d, and the error wraps ErrCostExceedsCapacity.
// A shadow one is decided as denying without a take (sc.over), and then
// no shadow bucket is taken. A soft one is left out of the takes, the
// request marked as over it (meta.softOver).
func (sc *scratch) overCapacity(c *compiled, d *floodgate.Decision) error {
	for i := range sc.metas {
		m, b := &sc.metas[i], &sc.all[i]
		capacity := b.Limit.Capacity()
		if !m.fromRequest || b.Cost <= capacity {
			continue
		}
		sc.res[i] = quota.Result{Limit: capacity}
		if m.soft {
			m.softOver, sc.softOver, sc.taken[i] = true, true, true
			continue
		}
		if !m.shadow {
			sc.describe(c, int32(i), d)
			return fmt.Errorf("%w: rule %q capacity %d, cost %d", ErrCostExceedsCapacity, c.rules[m.rule].name, capacity, b.Cost)
		}
		m.over, sc.taken[i], sc.over = true, true, true
	}
	return nil
}

// take charges the enforced (shadow false) or shadow buckets of the call
// in one Store.Take and records their results; with none to take it
// allows. On a store error the enforced buckets are decided by their
// on_store_error, and the shadow ones stay undecided; but when the
// caller's context has ended, no fail mode applies: nothing is admitted
// for a caller that has gone (callerGone). With hold, an
// enforced take books units ahead within the caller's deadline, and a
// take that charged is noted for waiting and settling.
func (l *Limiter) take(ctx context.Context, c *compiled, sc *scratch, shadow, hold bool) (bool, error) {
	bs, idx, res := sc.all, []int32(nil), sc.res
	if shadow || sc.shadows || sc.over || sc.softOver {
		sc.part, sc.partIdx = sc.part[:0], sc.partIdx[:0]
		for i := range sc.all {
			if m := &sc.metas[i]; m.shadow == shadow && !m.over && !m.softOver {
				sc.part = append(sc.part, sc.all[i])
				sc.partIdx = append(sc.partIdx, int32(i))
			}
		}
		sc.partRes = grow(sc.partRes, len(sc.part))
		clear(sc.partRes)
		bs, idx, res = sc.part, sc.partIdx, sc.partRes
	}
	if len(bs) == 0 {
		return true, nil
	}
	if hold && !shadow {
		l.bookAhead(ctx, c, sc, bs, idx)
	}
	allowed, err := l.store.Take(ctx, bs, res)
	switch {
	case err != nil && shadow:
		return false, err
	case err != nil && ctx.Err() != nil:
		allowed, sc.gone = callerGone(bs, res), true
	case err != nil:
		allowed = quota.DecideUnavailable(bs, res, nil)
	case hold && allowed:
		sc.charged.note(c, sc, bs, idx, res, shadow)
	}
	if idx == nil {
		for i := range sc.taken {
			sc.taken[i] = true
		}
		return allowed, err
	}
	for j, i := range idx {
		sc.res[i], sc.taken[i] = res[j], true
	}
	return allowed, err
}

// peekTake reads the enforced (shadow false) or shadow buckets of the
// call in one take at a cost of 0, which charges nothing, then judges
// each by the cost it was to be charged: a bucket with less Remaining
// denies, with RetryAfter its Reset (Never when the cost is above its
// capacity). It reports whether every bucket read would allow.
func (l *Limiter) peekTake(ctx context.Context, c *compiled, sc *scratch, shadow bool) (bool, error) {
	sc.want = grow(sc.want, len(sc.all))
	for i := range sc.all {
		sc.want[i] = sc.all[i].Cost
		if sc.metas[i].shadow == shadow {
			sc.all[i].Cost = 0
		}
	}
	allowed, err := l.take(ctx, c, sc, shadow, false)
	for i := range sc.all {
		if sc.metas[i].shadow != shadow {
			continue
		}
		sc.all[i].Cost = sc.want[i]
		r := &sc.res[i]
		if err != nil || !sc.taken[i] || !r.Allowed || r.Remaining >= sc.want[i] {
			continue
		}
		r.Allowed, r.RetryAfter, allowed = false, r.Reset, false
		if sc.want[i] > sc.all[i].Limit.Capacity() {
			r.RetryAfter = quota.Never
		}
	}
	return allowed, err
}

// bindItems picks each request's binding bucket (sc.bound) and writes its
// decision into out: an enforced bucket that denied, else a shadow one
// that would deny, else the enforced one with the least Remaining. For a
// single request, allowed and shadowAllowed (what the enforced and the
// shadow take said) are the verdicts; for several, each bucket's own
// result is.
func (sc *scratch) bindItems(c *compiled, out []floodgate.Decision, allowed, shadowAllowed bool, how call) {
	real, shadow := byResults, byResults
	if how.single {
		real, shadow = verdictOf(allowed), verdictOf(shadowAllowed)
	}
	for k := range sc.items {
		if out[k].Policy != "" { // exempt, or a shadow deny-list decision
			continue
		}
		br, realOK, bs, shadowOK := sc.bind(sc.itemRefs(k), real, shadow)
		switch {
		case br >= 0 && !realOK:
			sc.bound[k] = br
		case bs >= 0 && !shadowOK:
			sc.bound[k] = bs
		case br >= 0:
			sc.bound[k] = br
		}
		if b := sc.bound[k]; b >= 0 {
			sc.describe(c, b, &out[k])
		}
	}
}

// itemRefs returns the indices in sc.all of item k's buckets.
func (sc *scratch) itemRefs(k int) []int32 {
	start := int32(0)
	if k > 0 {
		start = sc.ends[k-1]
	}
	return sc.refs[start:sc.ends[k]]
}

// verdict is what decides whether a set of buckets (a request's enforced
// ones, or its shadow ones) allowed.
type verdict uint8

const (
	byResults   verdict = iota // each bucket's result: a request of several
	takeAllowed                // the take allowed: a single request
	takeDenied                 // the take denied: a single request
)

func verdictOf(allowed bool) verdict {
	if allowed {
		return takeAllowed
	}
	return takeDenied
}

// bind returns, in one pass over refs' buckets that a take decided, the
// binding bucket of the enforced ones and of the shadow ones (-1: none)
// and whether each set allowed, by its verdict. An allowed set binds the
// bucket with the least Remaining; a denied one the denying bucket with
// the longest RetryAfter (Never longest), or, when none says it denies (a
// store that denies with every bucket allowing), the first. Ties go to
// the earliest: the most specific rule of the request.
func (sc *scratch) bind(refs []int32, real, shadow verdict) (br int32, realOK bool, bs int32, shadowOK bool) {
	first, least, worst := [2]int32{-1, -1}, [2]int32{-1, -1}, [2]int32{-1, -1}
	for _, i := range refs {
		if !sc.taken[i] || sc.metas[i].soft { // a soft rule never binds
			continue
		}
		s := 0
		if sc.metas[i].shadow {
			s = 1
		}
		r := &sc.res[i]
		if first[s] < 0 {
			first[s], least[s] = i, i
		} else if r.Remaining < sc.res[least[s]].Remaining {
			least[s] = i
		}
		if !r.Allowed && (worst[s] < 0 || later(r.RetryAfter, sc.res[worst[s]].RetryAfter)) {
			worst[s] = i
		}
	}
	br, realOK = pick(real, first[0], least[0], worst[0])
	bs, shadowOK = pick(shadow, first[1], least[1], worst[1])
	return br, realOK, bs, shadowOK
}

// pick is bind's choice in one set of buckets.
func pick(v verdict, first, least, worst int32) (int32, bool) {
	switch {
	case v == takeAllowed:
		return least, true
	case worst >= 0:
		return worst, false
	case v == takeDenied:
		return first, false
	}
	return least, true
}

// bindCall writes into d the call's decision over every request: on a
// deny the denying bucket with the longest RetryAfter, on an allow a
// shadow bucket's would-be denial, else the bucket with the least
// Remaining.
func (sc *scratch) bindCall(c *compiled, allowed bool, d *floodgate.Decision) {
	bestReal, bestShadow := int32(-1), int32(-1)
	for i := range sc.all {
		if !sc.taken[i] || sc.metas[i].soft { // a soft rule never binds
			continue
		}
		if sc.metas[i].shadow {
			if !sc.res[i].Allowed && (bestShadow < 0 || later(sc.res[i].RetryAfter, sc.res[bestShadow].RetryAfter)) {
				bestShadow = int32(i)
			}
			continue
		}
		if bestReal < 0 || better(&sc.res[i], &sc.res[bestReal], allowed) {
			bestReal = int32(i)
		}
	}
	*d = floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}
	if len(sc.items) > 0 {
		d.Priority = sc.items[0].req.Priority
	}
	switch {
	case bestReal >= 0 && !allowed:
		sc.describe(c, bestReal, d)
	case bestShadow >= 0:
		sc.describe(c, bestShadow, d)
	case bestReal >= 0:
		sc.describe(c, bestReal, d)
	}
	if !allowed { // also a store that denied with every bucket allowing
		d.Allowed = false
	}
}

// errors returns the call's error: the store's failure (the enforced
// buckets were decided by on_store_error), the shadow take's, and a cost
// no wait can cure (a binding bucket denied with RetryAfter Never). A
// single request that the takes allowed has none.
func (sc *scratch) errors(c *compiled, out []floodgate.Decision, allowed bool, realErr, shadowErr error, how call) error {
	var errs []error
	if realErr != nil && sc.gone {
		errs = append(errs, fmt.Errorf("tiers: the caller's context ended before the store answered; nothing admitted: %w", realErr))
	} else if realErr != nil {
		if how.single {
			// Named by the enforced binding bucket, even when a shadow
			// rule's would-be denial is the decision.
			b, _, _, _ := sc.bind(sc.itemRefs(0), verdictOf(allowed), byResults)
			var d floodgate.Decision
			sc.describe(c, b, &d)
			errs = append(errs, fmt.Errorf("tiers: store failed, deciding by on_store_error (%s by rule %q): %w", d.Source, d.Policy, realErr))
		} else {
			errs = append(errs, fmt.Errorf("tiers: store failed, deciding by on_store_error: %w", realErr))
		}
	}
	if shadowErr != nil {
		errs = append(errs, fmt.Errorf("tiers: shadow rules not decided: %w", shadowErr))
	}
	for k := range sc.items {
		b := sc.bound[k]
		if b < 0 || sc.res[b].Allowed || sc.metas[b].shadow {
			continue
		}
		switch {
		case !how.single && sc.res[b].RetryAfter == quota.Never:
			errs = append(errs, fmt.Errorf("%w: rule %q, cost %d (items[%d])", ErrCostExceedsCapacity, sc.all[b].Rule, sc.all[b].Cost, k))
		case how.single && realErr == nil && sc.res[b].RetryAfter < 0:
			errs = append(errs, fmt.Errorf("%w: rule %q", ErrCostExceedsCapacity, out[k].Policy))
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
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

func later(a, b time.Duration) bool {
	if b == quota.Never {
		return false
	}
	return a == quota.Never || a > b
}

// describe writes into d (which holds the request's Skipped and
// Priority) the decision of bucket i of the call: Allowed is the bucket's
// own result, or for a shadow bucket, which binds only as a would-be
// denial, true with Shadow set. RetryAfter is 0 when waiting cannot cure
// the deny (Never) or nothing is denied.
func (sc *scratch) describe(c *compiled, i int32, d *floodgate.Decision) {
	m := &sc.metas[i]
	var cr *cRule
	if m.rule >= 0 {
		cr = &c.rules[m.rule]
	} else {
		cr = &c.rls.own // a descriptor's own limit
	}
	res := &sc.res[i]
	b := &sc.all[i]
	d.Allowed = res.Allowed || m.shadow
	d.Stage = floodgate.StageTiers
	d.Source = res.Source
	if d.Source == "" {
		d.Source = floodgate.SourceStore
	}
	d.Policy = cr.policyName(m, b) // "<rule>/<period>" for one window of several
	d.Limit, d.Window = res.Limit, b.Limit.Period
	d.Remaining, d.Reset, d.RetryAfter = res.Remaining, res.Reset, res.RetryAfter
	d.HideQuota, d.Shadow = cr.hide, m.shadow
	if m.shadow || d.RetryAfter < 0 {
		d.RetryAfter = 0
	}
}

// callerGone answers a take that failed after the caller's context ended:
// every bucket denies, with RetryAfter 0 (no wait admits a request that is
// gone), whatever its on_store_error; an "open" rule must not admit it.
func callerGone(bs []quota.Bucket, res []quota.Result) bool {
	for i := range bs {
		res[i] = quota.Result{Limit: bs[i].Limit.Capacity(), Remaining: 0}
	}
	return false
}
