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
//  3. charge: the enforced buckets are taken in one Store.Take and, only
//     if they allowed, the shadow buckets in a second; when the store
//     fails, the enforced buckets are decided by their rules'
//     on_store_error and the shadow ones stay undecided.
//  4. bindItems, bindCall: each request's binding bucket, and the call's.
//  5. a single request that waits for units booked ahead (max_wait) waits,
//     and one whose rules settle gets the Done that settles them.

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
}

// callItem is one request of a call: the request, the one rule it is
// limited to (-1: every rule it matches) and whether it only peeks.
type callItem struct {
	req  *floodgate.Request
	rule int32
	peek bool
}

// run decides the requests in sc.items under c, writing each one's
// decision into out (len(out) >= len(sc.items)); see the steps above.
// It returns the call's decision, and for a call that holds the Done of a
// request whose rules settle.
func (l *Limiter) run(ctx context.Context, c *compiled, sc *scratch, out []floodgate.Decision, how call) (floodgate.Decision, floodgate.Done, error) {
	sc.reset()
	if k, err := sc.gather(c, out, how); k >= 0 {
		return out[k], nil, err
	}
	sc.res = grow(sc.res, len(sc.all))
	sc.taken = grow(sc.taken, len(sc.all))
	clear(sc.res)
	clear(sc.taken)
	if how.single {
		if k, err := sc.overCapacity(c, out); k >= 0 {
			return out[k], nil, err
		}
	}
	hold := how.hold && c.shaping
	if hold {
		sc.charged.reset()
	}
	allowed, realErr := l.take(ctx, c, sc, false, hold)
	shadowAllowed, shadowErr := true, error(nil)
	if allowed && !sc.over { // a shadow bucket over its capacity is decided already
		shadowAllowed, shadowErr = l.take(ctx, c, sc, true, hold)
	}
	sc.bindItems(c, out, allowed, shadowAllowed, how)
	err := sc.errors(c, out, allowed, realErr, shadowErr, how)
	if !how.single {
		return sc.bindCall(c, allowed), nil, err
	}
	d := out[0]
	d.Allowed = d.Allowed && allowed
	if b := sc.bound[0]; b >= 0 && !sc.metas[b].over {
		d.SetQuotas(sc.quotas(c, int(b), allowed && !sc.metas[b].shadow))
	}
	if hold && sc.charged.any() {
		return l.shape(ctx, sc, d, err)
	}
	return d, nil, err
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
	sc.shadows, sc.over = false, false
}

// gather resolves every request of the call into sc.all and starts each
// one's decision in out. It returns the first request that refuses the
// whole call before anything is charged (a negative cost, an address in
// the deny list), with the error it is refused with, or -1.
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
		}
		sc.ends = append(sc.ends, int32(len(sc.refs)))
	}
	return refused, err
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
	sc.resolve(c, it.req, lo, hi)
	sc.setKeys(from)
	d.Skipped = sc.skippedNames(c)
	n := from
	for j := from; j < len(sc.all); j++ {
		b, m := &sc.all[j], &sc.metas[j]
		if it.peek {
			b.Cost = 0
		}
		if !how.hold {
			b.MaxWait = 0 // never held: decided at once
		}
		if !how.single {
			if i, ok := sc.find(n, b.Key, m.shadow); ok {
				sc.all[i].Cost = satAdd(sc.all[i].Cost, b.Cost)
				sc.refs = append(sc.refs, i)
				continue
			}
		}
		if n != j {
			sc.all[n], sc.metas[n] = *b, *m
		}
		sc.shadows = sc.shadows || m.shadow
		sc.refs = append(sc.refs, int32(n))
		n++
		if !how.single {
			sc.indexMerged(n)
		}
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
// enforced one refuses the request (returned: 0, with an error wrapping
// ErrCostExceedsCapacity) before anything is charged; a shadow one is
// decided as denying without a take (sc.over), and then no shadow bucket
// is taken. It returns -1 when nothing is refused.
func (sc *scratch) overCapacity(c *compiled, out []floodgate.Decision) (int, error) {
	for i := range sc.metas {
		m, b := &sc.metas[i], &sc.all[i]
		capacity := b.Limit.Capacity()
		if !m.fromRequest || b.Cost <= capacity {
			continue
		}
		sc.res[i] = quota.Result{Limit: capacity}
		if !m.shadow {
			out[0] = sc.decision(c, int32(i), out[0])
			return 0, fmt.Errorf("%w: rule %q capacity %d, cost %d", ErrCostExceedsCapacity, c.rules[m.rule].name, capacity, b.Cost)
		}
		m.over, sc.taken[i], sc.over = true, true, true
	}
	return -1, nil
}

// take charges the enforced (shadow false) or shadow buckets of the call
// in one Store.Take and records their results; with none to take it
// allows. On a store error the enforced buckets are decided by their
// on_store_error, and the shadow ones stay undecided. With hold, an
// enforced take books units ahead within the caller's deadline, and a
// take that charged is noted for waiting and settling.
func (l *Limiter) take(ctx context.Context, c *compiled, sc *scratch, shadow, hold bool) (bool, error) {
	bs, idx, res := sc.all, []int32(nil), sc.res
	if shadow || sc.shadows || sc.over {
		sc.part, sc.partIdx = sc.part[:0], sc.partIdx[:0]
		for i := range sc.all {
			if sc.metas[i].shadow == shadow && !sc.metas[i].over {
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

// bindItems picks each request's binding bucket (sc.bound) and writes its
// decision into out: an enforced bucket that denied, else a shadow one
// that would deny, else the enforced one with the least Remaining.
// allowed and shadowAllowed are what the enforced and the shadow take
// said.
func (sc *scratch) bindItems(c *compiled, out []floodgate.Decision, allowed, shadowAllowed bool, how call) {
	for k := range sc.items {
		if out[k].Policy != "" { // exempt, or a shadow deny-list decision
			continue
		}
		refs := sc.itemRefs(k)
		br, realOK := sc.bindTaken(refs, false, allowed, how)
		bs, shadowOK := sc.bindTaken(refs, true, shadowAllowed, how)
		switch {
		case br >= 0 && !realOK:
			sc.bound[k] = br
		case bs >= 0 && !shadowOK:
			sc.bound[k] = bs
		case br >= 0:
			sc.bound[k] = br
		}
		b := sc.bound[k]
		if b < 0 {
			continue
		}
		out[k] = sc.decision(c, b, out[k])
		if sc.metas[b].shadow { // binds only as a would-be denial
			out[k].Allowed, out[k].Shadow, out[k].RetryAfter = true, true, 0
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

// bind returns the binding bucket among refs of the enforced (shadow
// false) or shadow buckets that a take decided, or -1, and whether they
// all allowed: then the one with the least Remaining, else the denying
// one with the longest RetryAfter (Never longest); ties go to the
// earliest (the most specific rule of the request).
func (sc *scratch) bind(refs []int32, shadow bool) (int32, bool) {
	least, worst := int32(-1), int32(-1)
	for _, i := range refs {
		if !sc.taken[i] || sc.metas[i].shadow != shadow {
			continue
		}
		r := &sc.res[i]
		if !r.Allowed {
			if worst < 0 || later(r.RetryAfter, sc.res[worst].RetryAfter) {
				worst = i
			}
			continue
		}
		if worst < 0 && (least < 0 || r.Remaining < sc.res[least].Remaining) {
			least = i
		}
	}
	if worst >= 0 {
		return worst, false
	}
	return least, true
}

// bindTaken binds among refs' enforced (shadow false) or shadow buckets,
// as bind does; allowed is what their take said. A single request is the
// call: when the take denied, it is denied, and with no bucket that
// denied (a store that denies with every bucket allowing) its first
// bucket binds.
func (sc *scratch) bindTaken(refs []int32, shadow, allowed bool, how call) (int32, bool) {
	b, ok := sc.bind(refs, shadow)
	if how.single && !allowed && ok {
		return sc.first(refs, shadow), false
	}
	return b, ok
}

// first returns the first of refs' enforced (shadow false) or shadow
// buckets that a take decided, or -1.
func (sc *scratch) first(refs []int32, shadow bool) int32 {
	for _, i := range refs {
		if sc.taken[i] && sc.metas[i].shadow == shadow {
			return i
		}
	}
	return -1
}

// bindCall returns the call's decision over every request: on a deny the
// denying bucket with the longest RetryAfter, on an allow a shadow
// bucket's would-be denial, else the bucket with the least Remaining.
func (sc *scratch) bindCall(c *compiled, allowed bool) floodgate.Decision {
	bestReal, bestShadow := int32(-1), int32(-1)
	for i := range sc.all {
		if !sc.taken[i] {
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
	d := floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}
	if len(sc.items) > 0 {
		d.Priority = sc.items[0].req.Priority
	}
	switch {
	case bestReal >= 0 && !allowed:
		d = sc.decision(c, bestReal, d)
	case bestShadow >= 0:
		d = sc.decision(c, bestShadow, d)
	case bestReal >= 0:
		d = sc.decision(c, bestReal, d)
	}
	d.Skipped = ""
	if !allowed { // also a store that denied with every bucket allowing
		d.Allowed = false
	}
	return d
}

// errors returns the call's error: the store's failure (the enforced
// buckets were decided by on_store_error), the shadow take's, and a cost
// no wait can cure (a binding bucket denied with RetryAfter Never).
func (sc *scratch) errors(c *compiled, out []floodgate.Decision, allowed bool, realErr, shadowErr error, how call) error {
	var errs []error
	if realErr != nil {
		if how.single {
			// Named by the enforced binding bucket, even when a shadow
			// rule's would-be denial is the decision.
			b, _ := sc.bindTaken(sc.itemRefs(0), false, allowed, how)
			d := sc.decision(c, b, floodgate.Decision{})
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

// decision describes bucket i of the call, over base (which holds the
// request's Skipped and Priority): Allowed is the bucket's own result,
// or, for a shadow rule, true with Shadow set when it would deny.
// RetryAfter is 0 when waiting cannot cure the deny (Never) or nothing
// is denied.
func (sc *scratch) decision(c *compiled, i int32, base floodgate.Decision) floodgate.Decision {
	m := &sc.metas[i]
	cr := &c.rules[m.rule]
	res := &sc.res[i]
	b := &sc.all[i]
	src := res.Source
	if src == "" {
		src = floodgate.SourceStore
	}
	shadow := m.shadow && !res.Allowed
	d := floodgate.Decision{
		Allowed:    res.Allowed || m.shadow,
		Stage:      floodgate.StageTiers,
		Source:     src,
		Policy:     cr.policyName(m, b), // "<rule>/<period>" for one window of several
		Limit:      res.Limit,
		Window:     b.Limit.Period,
		Remaining:  res.Remaining,
		Reset:      res.Reset,
		RetryAfter: res.RetryAfter,
		HideQuota:  cr.hide,
		Shadow:     shadow,
		Priority:   base.Priority,
		Skipped:    base.Skipped,
	}
	if shadow || d.RetryAfter < 0 {
		d.RetryAfter = 0
	}
	return d
}
