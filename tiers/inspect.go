package tiers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// ErrNoRule is wrapped by the error Inspect and Reset return when no rule
// of the policy in force applies to the request they are given (or none
// of the rules named): there is nothing to show or reset, which usually
// means a mistyped identity, a missing method, or the wrong policy.
var ErrNoRule = errors.New("tiers: no rule applies")

// BucketState is one bucket of a rule that applies to a request, as the
// store holds it: what an operator reads when a client says it is
// wrongly blocked (Limiter.Inspect).
type BucketState struct {
	// Rule is the rule's name. A rule with several windows has one
	// BucketState per window, told apart by Limit.
	Rule string
	// Key is the bucket's key in the store.
	Key string
	// Shadow is true for a rule that only reports (Rule.Shadow,
	// Policy.Shadow, or outside its enforce_percent share).
	Shadow bool
	// Limit is the bucket's arithmetic (algorithm, rate, period, burst).
	Limit quota.Limit
	// Cost is what one request of the given kind is charged.
	Cost int64
	// Remaining is the units left now, Limit.Capacity() when full.
	Remaining int64
	// Reset is the time until the bucket is full again.
	Reset time.Duration
	// Source is what answered: floodgate.SourceStore, or a fallback's
	// local decision when the store could not (package fallback).
	Source floodgate.Source
}

// Inspect reads, without charging them, the buckets of every rule of the
// policy in force that applies to r, most specific first: r names an
// identity (Identity: user, tenant, API key, IP; Tier when rules follow
// tiers) and optionally a method. Without a method only the rules whose
// match names no method apply; give the method to see the rules of that
// method too. The buckets are read in one take at a cost of 0 (which
// charges nothing) through the Limiter's store, at exact consistency: a
// leased or async rule shows what the store holds, with the units leased
// to instances counted as spent.
//
// It returns an error wrapping ErrNoRule when no rule applies (it names
// the rules that need an identity component r lacks), and an error saying
// so when r's address is in the policy's exempt or deny list, which no
// bucket decides.
func (l *Limiter) Inspect(ctx context.Context, r *floodgate.Request) ([]BucketState, error) {
	bs, shadow, err := l.operatorBuckets("Inspect", r, nil)
	if err != nil {
		return nil, err
	}
	res := make([]quota.Result, len(bs))
	want := make([]int64, len(bs))
	for i := range bs {
		want[i], bs[i].Cost = bs[i].Cost, 0
	}
	if _, err := l.store.Take(ctx, bs, res); err != nil {
		return nil, fmt.Errorf("tiers: Inspect: reading %d buckets: %w", len(bs), err)
	}
	out := make([]BucketState, len(bs))
	for i := range bs {
		src := res[i].Source
		if src == "" {
			src = floodgate.SourceStore
		}
		out[i] = BucketState{Rule: bs[i].Rule, Key: bs[i].Key, Shadow: shadow[i], Limit: bs[i].Limit, Cost: want[i],
			Remaining: res[i].Remaining, Reset: res[i].Reset, Source: src}
	}
	return out, nil
}

// Reset restores to full capacity the buckets of the rules of the policy
// in force that apply to r (as Inspect finds them) and are named in
// rules, or of all of them when rules is empty, by deleting their state
// in the store (quota.Resetter), and returns the buckets it reset, each
// now full. A name in rules that is no rule applying to r is an error
// wrapping ErrNoRule, and nothing is reset. The store must be a
// quota.Resetter (memstore and redisstore are, and the wrappers of this
// module forward it); otherwise Reset returns an error saying so.
func (l *Limiter) Reset(ctx context.Context, r *floodgate.Request, rules ...string) ([]BucketState, error) {
	rs, ok := l.store.(quota.Resetter)
	if !ok || !quota.Resets(l.store) {
		return nil, fmt.Errorf("tiers: Reset: the store %T cannot reset buckets (it is not a quota.Resetter, or what it wraps is not)", l.store)
	}
	bs, shadow, err := l.operatorBuckets("Reset", r, rules)
	if err != nil {
		return nil, err
	}
	if err := rs.Reset(ctx, bs); err != nil {
		return nil, fmt.Errorf("tiers: Reset: %w", err)
	}
	out := make([]BucketState, len(bs))
	for i := range bs {
		out[i] = BucketState{Rule: bs[i].Rule, Key: bs[i].Key, Shadow: shadow[i], Limit: bs[i].Limit, Cost: bs[i].Cost,
			Remaining: bs[i].Limit.Capacity(), Source: floodgate.SourceStore}
	}
	return out, nil
}

// operatorBuckets resolves r under the policy in force into the buckets
// of the rules that apply to it, those named in only when only is not
// empty, read at exact consistency and never waiting, with whether each
// is a shadow rule's. who names the caller in errors that are not
// ErrNoRule's.
func (l *Limiter) operatorBuckets(who string, r *floodgate.Request, only []string) ([]quota.Bucket, []bool, error) {
	if r == nil {
		return nil, nil, fmt.Errorf("tiers: %s: request is nil", who)
	}
	c := l.state.Load()
	if denied, listed := c.listed(r); listed {
		list := "exempt"
		if denied {
			list = "deny"
		}
		return nil, nil, fmt.Errorf("%w: address %s is in the policy's %s list, which decides it without any bucket", ErrNoRule, r.Identity.IP, list)
	}
	sc := l.pool.Get().(*scratch)
	defer l.release(sc)
	sc.all, sc.metas = sc.all[:0], sc.metas[:0]
	sc.resolve(c, r, 0, len(c.rules))
	sc.setKeys(0)
	var (
		bs     []quota.Bucket
		shadow []bool
		found  = map[string]bool{}
	)
	for i := range sc.all {
		b := sc.all[i]
		found[b.Rule] = true
		if len(only) > 0 && !slices.Contains(only, b.Rule) {
			continue
		}
		b.Consistency, b.SyncInterval, b.MaxWait = quota.Exact, 0, 0
		bs = append(bs, b)
		shadow = append(shadow, sc.metas[i].shadow)
	}
	var missing []string
	for _, name := range only {
		if !found[name] {
			missing = append(missing, fmt.Sprintf("%q", name))
		}
	}
	switch {
	case len(missing) > 0:
		return nil, nil, fmt.Errorf("%w: %s %s to %s", ErrNoRule, plural(len(missing), "rule", "rules"), strings.Join(missing, ", "), describe(r))
	case len(bs) == 0:
		var extra string
		if len(sc.skipped) > 0 {
			var names []string
			for _, k := range sc.skipped {
				names = append(names, c.rules[k].name)
			}
			extra = fmt.Sprintf(" (%s %s %s keyed on an identity component it lacks)",
				plural(len(names), "rule", "rules"), strings.Join(names, ", "), plural(len(names), "matches but is", "match but are"))
		}
		if r.Method == "" {
			extra += "; without a method, only rules that match every method apply"
		}
		return nil, nil, fmt.Errorf("%w to %s%s", ErrNoRule, describe(r), extra)
	}
	return bs, shadow, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// describe names r's identity and method for an error.
func describe(r *floodgate.Request) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("method", r.Method)
	add("user", r.Identity.User)
	add("tenant", r.Identity.Tenant)
	if r.Identity.APIKey != "" {
		parts = append(parts, "api_key=(given)") // never the key itself
	}
	if r.Identity.IP.IsValid() {
		add("ip", r.Identity.IP.String())
	}
	add("tier", r.Tier)
	if len(parts) == 0 {
		return "an empty request"
	}
	return strings.Join(parts, " ")
}
