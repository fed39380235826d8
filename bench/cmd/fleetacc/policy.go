package main

import (
	"math"
	"net/netip"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

// level is one rule of the generated policy: shared levels have one bucket
// for every principal (the tenant), the others one bucket per principal.
type level struct {
	name        string
	scope       tiers.Scope
	rate, burst int64 // per second; capacity
	shared      bool
}

// levelsFor returns the rules of a run. One level is the user: -rate per
// second, burst -burst, per principal. Four levels charge every request to
// its tenant (all principals share one, at 3/4 of the principals' summed
// user rates, so it binds in aggregate), its user (-rate, -burst: the
// per-principal binding level), its API key (2x) and its IP (1.5x).
func levelsFor(n int, rate, burst int64, keys int) []level {
	user := level{name: "user", scope: tiers.ScopeUser, rate: rate, burst: burst}
	if n == 1 {
		return []level{user}
	}
	k := int64(keys)
	return []level{
		{name: "tenant", scope: tiers.ScopeTenant, rate: max(1, k*rate*3/4), burst: max(1, k*burst*3/4), shared: true},
		user,
		{name: "api_key", scope: tiers.ScopeAPIKey, rate: 2 * rate, burst: 2 * burst},
		{name: "ip", scope: tiers.ScopeIP, rate: rate * 3 / 2, burst: max(1, burst*3/2)},
	}
}

// countRule names the rule -count adds: per principal, a capacity of
// countCapacity refilling 1 unit an hour, so it never binds and what
// Redis's bucket lacks of its capacity after a run is every unit charged
// to the principal (by takes, reports and settlements), within a unit.
const (
	countRule     = "count"
	countCapacity = 1_000_000_000
)

// policyFor returns the policy of a run: every rule token bucket, in the
// run's consistency, deciding by onErr when the store cannot answer; with
// count, the counting rule (countRule) too.
func policyFor(ls []level, mode quota.Consistency, sync time.Duration, onErr quota.FailMode, count bool) *tiers.Policy {
	p := &tiers.Policy{}
	for _, l := range ls {
		r := tiers.Rule{
			Name:         l.name,
			Key:          []tiers.Scope{l.scope},
			Rate:         tiers.Rate{N: l.rate, Period: time.Second},
			Burst:        l.burst,
			Algorithm:    quota.TokenBucket,
			OnStoreError: onErr,
			Consistency:  mode,
		}
		if mode == quota.Async {
			r.SyncInterval = sync
		}
		p.Rules = append(p.Rules, r)
	}
	if count {
		r := tiers.Rule{
			Name:         countRule,
			Key:          []tiers.Scope{tiers.ScopeUser},
			Rate:         tiers.Rate{N: 1, Period: time.Hour},
			Burst:        countCapacity,
			Algorithm:    quota.TokenBucket,
			OnStoreError: onErr,
			Consistency:  mode,
		}
		if mode == quota.Async {
			r.SyncInterval = sync
		}
		p.Rules = append(p.Rules, r)
	}
	return p
}

// request returns principal k's request: tenant t0 for all, user, API key
// and IP of its own.
func request(k int) floodgate.Request {
	ks := strconv.Itoa(k)
	return floodgate.Request{
		Method: "/fleetacc.v1.Bench/Call",
		Identity: floodgate.Identity{
			Tenant: "t0",
			User:   "u" + ks,
			APIKey: "key-" + ks,
			IP:     netip.AddrFrom4([4]byte{10, 0, byte(k >> 8), byte(k)}),
		},
	}
}

// bound is the most a perfect token bucket that starts full admits in a
// window of t: its capacity plus its refill.
func bound(rate, burst int64, t time.Duration) float64 {
	return float64(burst) + float64(rate)*t.Seconds()
}

// accuracy is what the parent computes from the principals' admitted
// counts over a window.
type accuracy struct {
	// Allowed is the most a perfect global limiter could have admitted:
	// per shared level its bound, capped by the sum over principals of
	// the tightest per-principal bound or the principal's demand (the
	// decisions asked for it), whichever is less.
	Allowed float64
	// Formula is Allowed with every bucket's bound raised by slack(level):
	// the async bound n × rate × sync interval per bucket, or an outage's
	// (killSlack).
	Formula float64
	// Excess sums, over every bucket of every level, what it admitted
	// beyond its own bound (0 for a limiter that is never over anywhere);
	// FormulaExcess does the same against the raised bounds.
	Excess, FormulaExcess float64
	// Worst names the bucket with the largest excess.
	Worst string
}

// measureAccuracy compares the admitted counts per principal with the
// bounds of window t, given the decisions asked per principal (demand);
// slack is the extra units a bucket of level l may admit by the run's
// formula (async's, or an outage's).
func measureAccuracy(ls []level, perKey, demand []uint64, t time.Duration, slack func(l level) float64) accuracy {
	var a accuracy
	var total uint64
	for _, n := range perKey {
		total += n
	}
	sharedMin, sharedMinF := math.Inf(1), math.Inf(1)
	var sumKeys, sumKeysF float64
	worst := 0.0
	over := func(name string, admitted uint64, b, bf float64) {
		if e := float64(admitted) - b; e > 0 {
			a.Excess += e
			if e > worst {
				worst, a.Worst = e, name
			}
		}
		if e := float64(admitted) - bf; e > 0 {
			a.FormulaExcess += e
		}
	}
	for _, l := range ls {
		b := bound(l.rate, l.burst, t)
		bf := b + slack(l)
		if l.shared {
			sharedMin, sharedMinF = min(sharedMin, b), min(sharedMinF, bf)
			over(l.name, total, b, bf)
			continue
		}
		for k, n := range perKey {
			over(l.name+"/"+strconv.Itoa(k), n, b, bf)
		}
	}
	for k := range perKey {
		kMin, kMinF := float64(demand[k]), float64(demand[k])
		for _, l := range ls {
			if !l.shared {
				b := bound(l.rate, l.burst, t)
				kMin, kMinF = min(kMin, b), min(kMinF, b+slack(l))
			}
		}
		sumKeys += kMin
		sumKeysF += kMinF
	}
	a.Allowed, a.Formula = min(sharedMin, sumKeys), min(sharedMinF, sumKeysF)
	return a
}
