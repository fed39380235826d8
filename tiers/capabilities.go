package tiers

import (
	"fmt"
	"strconv"

	"github.com/floodgate-go/floodgate/quota"
)

// What a Limiter asks of its store beyond Take, each found on the store or
// on a store beneath it (quota.Layers): wrappers (package otel's store,
// package fallback, package tiers/localfirst) implement Unwrap, so
// wrapping never hides what the store beneath can do.

// decidesOnStoreError reports whether a layer of store answers every Take
// itself when its backend fails (package fallback; memstore, which has no
// backend to lose), so that no store error reaches the Limiter.
func decidesOnStoreError(store quota.Store) bool {
	for l := range quota.Layers(store) {
		if d, ok := l.(unavailableDecider); ok && d.DecidesOnStoreError() {
			return true
		}
	}
	return false
}

// consistencyDecider is implemented by a store that decides buckets of
// some consistencies locally (package tiers/localfirst: Leased and
// Async).
type consistencyDecider interface {
	DecidesConsistency(quota.Consistency) bool
}

// decidesConsistency reports whether a layer of store decides buckets of
// consistency m itself; every store decides Exact ones.
func decidesConsistency(store quota.Store, m quota.Consistency) bool {
	if m == quota.Exact {
		return true
	}
	for l := range quota.Layers(store) {
		if d, ok := l.(consistencyDecider); ok && d.DecidesConsistency(m) {
			return true
		}
	}
	return false
}

// checkStore refuses a policy whose rules need what store cannot do,
// naming each such rule: a leased or async rule over a store with no
// local-first layer would be decided exactly, a round trip per request,
// with nothing to say so but the decisions' source. (Rules that settle or
// wait are checked by the shaper.)
func checkStore(store quota.Store, c *compiled) error {
	rep := &reporter{}
	for i := range c.rules {
		cr := &c.rules[i]
		if decidesConsistency(store, cr.mode) {
			continue
		}
		rep.add("rules["+strconv.Itoa(cr.index)+"].consistency", fmt.Sprintf(
			"rule %q is %s, but no layer of the store (%T) decides %s buckets locally, so every request would be decided exactly in the store: wrap the store with localfirst.New (package tiers/localfirst), or make the rule exact",
			cr.name, cr.mode, store, cr.mode))
	}
	return rep.err()
}
