package tiers

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// AdmitAtMost admits up to r.Cost units of r and reports how many were
// granted: a batch endpoint's "take what you can" (go-redis/redis_rate's
// AllowAtMost). Every rule r matches still agrees: the rules that charge
// the request's cost (those without a cost of their own) are charged one
// grant, the largest amount each of them can give, at most r.Cost, all
// or nothing at that amount in one Store.Take (in Redis, one round trip);
// a rule with a cost of its own is charged that cost, and must allow it.
// The shadow rules are charged the grant.
//
// granted is from 1 to r.Cost when the decision allows, 0 when it denies;
// a denial's RetryAfter is the wait for one unit. A request in the
// policy's exempt list is granted r.Cost. r.Cost must be at least 1. Only
// the units of a rule decided by the store are split: without the store
// (on_store_error) a rule decides the whole r.Cost. No rule holds the
// request (max_wait) or settles its cost (settle); the units granted are
// spent.
func (l *Limiter) AdmitAtMost(ctx context.Context, r *floodgate.Request) (granted int64, d floodgate.Decision, err error) {
	if r == nil {
		return 0, floodgate.Decision{Stage: floodgate.StageTiers}, errors.New("tiers: AdmitAtMost: request is nil")
	}
	if r.Cost < 1 {
		return 0, floodgate.Decision{Stage: floodgate.StageTiers, Priority: r.Priority}, fmt.Errorf("%w: AdmitAtMost needs a cost of at least 1, got %d for %s", ErrInvalidCost, r.Cost, r.Method)
	}
	c := l.state.Load()
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.items = append(sc.items[:0], callItem{req: r, rule: -1})
	var out [1]floodgate.Decision
	_, err = l.run(ctx, c, sc, out[:], &out[0], call{single: true, atMost: true})
	if out[0].Allowed { // a shadow rule's would-be denial is allowed
		granted = sc.granted(r.Cost)
	}
	return granted, out[0], err
}

// markAtMost makes the buckets charged the request's cost share one
// grant (quota.Bucket.AtMost), the enforced ones at most the least of
// their capacities (no
// more is ever granted, and a store decided without, by on_store_error,
// then decides what could be), and no bucket wait.
func (sc *scratch) markAtMost() {
	most := int64(-1)
	for i := range sc.all {
		b := &sc.all[i]
		b.MaxWait = 0
		b.AtMost = sc.metas[i].fromRequest
		if b.AtMost && !sc.metas[i].shadow && (most < 0 || b.Limit.Capacity() < most) {
			most = b.Limit.Capacity()
		}
	}
	for i := range sc.all {
		if b := &sc.all[i]; b.AtMost && !sc.metas[i].shadow && most >= 0 {
			b.Cost = min(b.Cost, most)
		}
	}
}

// grantShadows charges the shadow buckets that were to share the grant
// the amount the enforced ones were granted.
func (sc *scratch) grantShadows() {
	g := sc.granted(-1)
	for i := range sc.all {
		if b := &sc.all[i]; sc.metas[i].shadow && b.AtMost {
			b.AtMost = false
			if g >= 0 {
				b.Cost = g
			}
		}
	}
}

// granted returns what the enforced AtMost buckets of an allowed take
// were granted, or most when the take had none.
func (sc *scratch) granted(most int64) int64 {
	for i := range sc.all {
		if m := &sc.metas[i]; m.shadow || m.softOver || !sc.all[i].AtMost || !sc.taken[i] {
			continue
		}
		return sc.res[i].Granted
	}
	return most
}
