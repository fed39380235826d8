package tiers

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/floodgate-go/floodgate"
)

// Several requests decided as one: a gateway's rate-limit call
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

// maxItems is the most items one AdmitMany call decides.
const maxItems = 256

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
// Rule, a nil Request or more than 256 items deny the call without
// charging anything, with an error.
func (l *Limiter) AdmitMany(ctx context.Context, items []Item, out []floodgate.Decision) (floodgate.Decision, error) {
	deny := floodgate.Decision{Stage: floodgate.StageTiers}
	switch {
	case len(out) < len(items):
		return deny, fmt.Errorf("tiers: AdmitMany: out has room for %d decisions, want one per item (%d)", len(out), len(items))
	case len(items) > maxItems:
		return deny, fmt.Errorf("tiers: AdmitMany: %d items; at most %d", len(items), maxItems)
	}
	c := l.state.Load()
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.items = sc.items[:0]
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
		sc.items = append(sc.items, callItem{req: it.Request, rule: rule, peek: it.Peek})
	}
	var d floodgate.Decision
	_, err := l.run(ctx, c, sc, out, &d, call{})
	return d, err
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

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// grow returns s with length n, reallocated when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
