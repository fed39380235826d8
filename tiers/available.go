package tiers

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Available answers, without charging anything, which of several
// alternatives would be admitted now: a gateway choosing among models,
// backends or regions asks once which ones still have quota for a
// request, and then admits the one it picks (Admit). alts are the
// alternatives, each an Item: usually the same request with the value
// that tells them apart (a header such as x-model, the method), and
// optionally limited to one rule (Item.Rule). Item.Peek is implied: no
// alternative is charged.
//
// Every bucket of every alternative is read in one Store.Take at a cost
// of 0, whatever the number of alternatives (on Redis standalone or
// Sentinel one script call; on a Cluster one per slot the buckets are in,
// in parallel); a bucket that several alternatives share (a per-tenant
// rule under per-model ones) is read once. Each alternative is then
// judged alone, as Admit would judge it now: it is admitted when every
// rule it applies to has at least the cost it would be charged left (its
// own cost, else Request.Cost, else 1). out[i] (len(out) >= len(alts))
// receives alternative i's decision: Allowed, and the binding rule with
// what it has left (Remaining is what the bucket holds now, before the
// request), RetryAfter on a deny (the bucket's Reset: when it is full
// again, an upper bound on the wait); SoftExceeded names the soft rules
// (Rule.Soft) it would go over, which admit it. Shadow rules are not
// read: they never deny. The policy's address lists apply as in Admit
// (exempt: allowed, Policy "exempt"; deny: denied, Policy "deny"), and
// so does when_missing deny. Available returns how many alternatives
// would be admitted.
//
// Between Available and Admit other requests may spend what was read:
// Admit decides. A nil Request, an unknown Rule, a negative cost, more
// than 256 alternatives or too small an out are errors, and nothing is
// read. When the store fails, every bucket is decided by its rule's
// on_store_error (DecideUnavailable) and the error is returned, wrapped.
func (l *Limiter) Available(ctx context.Context, alts []Item, out []floodgate.Decision) (int, error) {
	switch {
	case len(out) < len(alts):
		return 0, fmt.Errorf("tiers: Available: out has room for %d decisions, want one per alternative (%d)", len(out), len(alts))
	case len(alts) > maxItems:
		return 0, fmt.Errorf("tiers: Available: %d alternatives; at most %d", len(alts), maxItems)
	}
	c := l.state.Load()
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.items = sc.items[:0]
	for i := range alts {
		it := &alts[i]
		switch {
		case it.Request == nil:
			return 0, fmt.Errorf("tiers: Available: alts[%d].Request is nil", i)
		case it.Request.Cost < 0:
			return 0, fmt.Errorf("%w: %d for %s (alts[%d])", ErrInvalidCost, it.Request.Cost, it.Request.Method, i)
		}
		rule := int32(-1)
		if it.Rule != "" {
			k, ok := c.ruleIndex(it.Rule)
			if !ok {
				return 0, fmt.Errorf("%w: alts[%d].Rule %q", ErrUnknownRule, i, it.Rule)
			}
			rule = k
		}
		sc.items = append(sc.items, callItem{req: it.Request, rule: rule, peek: true})
	}
	sc.reset()
	// One request each: every alternative keeps its own buckets and
	// costs, judged alone; the reads are shared below.
	_, _ = sc.gather(c, out, call{single: true})
	err := l.readAlternatives(ctx, c, sc)
	n := 0
	for k := range sc.items {
		d := &out[k]
		if d.Policy == "" { // not decided by the address lists or when_missing
			if br, ok, _, _ := sc.bind(sc.itemRefs(k), byResults, byResults); br >= 0 {
				sc.describe(c, br, d)
				d.Allowed = ok
			}
		}
		if d.Allowed {
			n++
		}
	}
	if sc.softOver {
		sc.markSoft(c, out)
	}
	return n, err
}

// readAlternatives reads the enforced buckets of the call in one take at
// a cost of 0, each distinct key once, and judges each bucket by the cost
// it was to be charged, as peekTake does; a soft bucket that would deny
// is marked over (meta.softOver) instead.
func (l *Limiter) readAlternatives(ctx context.Context, c *compiled, sc *scratch) error {
	sc.res = grow(sc.res, len(sc.all))
	sc.taken = grow(sc.taken, len(sc.all))
	clear(sc.res)
	clear(sc.taken)
	// at (sc.partIdx) maps each bucket to its read in sc.part; -1: a
	// shadow bucket, not read.
	sc.part, sc.partIdx = sc.part[:0], grow(sc.partIdx, len(sc.all))
	for i := range sc.all {
		sc.partIdx[i] = -1
		if sc.metas[i].shadow {
			continue
		}
		j := sc.readIndex(i)
		if j < 0 {
			b := sc.all[i]
			b.Cost, b.MaxWait, b.AtMost = 0, 0, false
			j = int32(len(sc.part))
			sc.part = append(sc.part, b)
		}
		sc.partIdx[i] = j
	}
	if len(sc.part) == 0 {
		return nil
	}
	sc.partRes = grow(sc.partRes, len(sc.part))
	clear(sc.partRes)
	_, err := l.store.Take(ctx, sc.part, sc.partRes)
	if err != nil {
		if ctx.Err() == nil {
			quota.DecideUnavailable(sc.part, sc.partRes, nil)
		} else {
			callerGone(sc.part, sc.partRes)
		}
		err = fmt.Errorf("tiers: Available: reading %d buckets: %w", len(sc.part), err)
	}
	for i := range sc.all {
		j := sc.partIdx[i]
		if j < 0 {
			continue
		}
		r, want := &sc.res[i], sc.all[i].Cost
		*r, sc.taken[i] = sc.partRes[j], true
		if r.Allowed && r.Remaining < want {
			r.Allowed, r.RetryAfter = false, r.Reset
			if want > sc.all[i].Limit.Capacity() {
				r.RetryAfter = quota.Never
			}
		}
		if m := &sc.metas[i]; m.soft && !r.Allowed {
			m.softOver, sc.softOver = true, true
		}
	}
	return err
}

// readIndex returns the read in sc.part of an earlier bucket with the key
// of sc.all[i], or -1.
func (sc *scratch) readIndex(i int) int32 {
	key := sc.all[i].Key
	for k := range i {
		if j := sc.partIdx[k]; j >= 0 && sc.all[k].Key == key {
			return j
		}
	}
	return -1
}
