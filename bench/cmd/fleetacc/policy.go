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
// countCapacity that never binds. A token bucket refills 1 unit an hour,
// so what Redis's bucket lacks of its capacity after a run is every unit
// charged to the principal (by takes, reports and settlements), within a
// unit. A window algorithm counts countCapacity units per window of
// countWindow (the longest period a Limit takes): the window's count is
// every unit charged, as long as the run and the read lie in one window
// (readCount checks it).
const (
	countRule     = "count"
	countCapacity = 1_000_000_000
	countWindow   = quota.MaxPeriod
)

// ruleWindow is the period of every limiting rule: -rate units a second
// (a token bucket's refill; a window algorithm's window, of -rate units).
const ruleWindow = time.Second

// algorithms are the algorithms -algorithm takes: the token bucket and the
// two window algorithms whose local admits package fallback charges per
// window (fixed_window, sliding_window_counter). gcra and
// sliding_window_log are not measured here.
var algorithms = []quota.Algorithm{quota.TokenBucket, quota.FixedWindow, quota.SlidingWindowCounter}

// windowed reports whether alg counts units per window (no burst; its
// capacity is its rate).
func windowed(alg quota.Algorithm) bool { return !alg.CanBookAhead() }

// policyFor returns the policy of a run: every rule of algorithm alg, in
// the run's consistency, deciding by onErr when the store cannot answer;
// with count, the counting rule (countRule) too. A window algorithm's
// rule has no burst: its capacity is its rate per ruleWindow (levelsFor's
// burst is then the rate, see parseFlags).
func policyFor(ls []level, alg quota.Algorithm, mode quota.Consistency, sync time.Duration, onErr quota.FailMode, count bool) *tiers.Policy {
	p := &tiers.Policy{}
	for _, l := range ls {
		r := tiers.Rule{
			Name:         l.name,
			Key:          []tiers.Scope{l.scope},
			Rate:         tiers.Rate{N: l.rate, Period: ruleWindow},
			Burst:        l.burst,
			Algorithm:    alg,
			OnStoreError: onErr,
			Consistency:  mode,
		}
		if windowed(alg) {
			r.Burst = 0
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
			Algorithm:    alg,
			OnStoreError: onErr,
			Consistency:  mode,
		}
		if windowed(alg) {
			r.Rate, r.Burst = tiers.Rate{N: countCapacity, Period: countWindow}, 0
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

// windowsTouched is the number of windows of length w (aligned on the Unix
// epoch, as the stores align floor(now / W)) that the span [first, last]
// (Unix ns) touches: at least 1.
func windowsTouched(first, last int64, w time.Duration) int64 {
	if last < first {
		last = first
	}
	return floorDiv(last, int64(w)) - floorDiv(first, int64(w)) + 1
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// boundsFor returns the bound of a bucket of each level over a run whose
// decisions span [first, last] (Unix ns), for algorithm alg:
//
//   - token_bucket: burst + rate × (last − first), the bucket starting full;
//   - fixed_window: rate × the windows of ruleWindow the span touches: a
//     perfect fixed window admits at most its limit in each, whole or
//     partial (so up to 2 limits across a boundary, as the algorithm
//     allows);
//   - sliding_window_counter: the same. The counter's weighted count
//     (prev × (W − e)/W + curr) is never below curr, so no window's curr
//     passes the limit and the fixed window's bound holds; it is not tight
//     (a perfect counter admits the limit in the first window, then about
//     the limit per window under steady over-demand, but less where the
//     weight of a full previous window holds the next one back, as at
//     1.0× offered), so over against it is the least the fleet was over
//     and under the most it was under.
func boundsFor(alg quota.Algorithm, first, last int64) func(l level) float64 {
	if windowed(alg) {
		n := float64(windowsTouched(first, last, ruleWindow))
		return func(l level) float64 { return float64(l.rate) * n }
	}
	t := time.Duration(max(0, last-first))
	return func(l level) float64 { return bound(l.rate, l.burst, t) }
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
// bounds of a bucket of each level over the run (bnd, see boundsFor),
// given the decisions asked per principal (demand); slack is the extra
// units a bucket of level l may admit by the run's formula (async's, or an
// outage's).
func measureAccuracy(ls []level, perKey, demand []uint64, bnd func(l level) float64, slack func(l level) float64) accuracy {
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
		b := bnd(l)
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
				b := bnd(l)
				kMin, kMinF = min(kMin, b), min(kMinF, b+slack(l))
			}
		}
		sumKeys += kMin
		sumKeysF += kMinF
	}
	a.Allowed, a.Formula = min(sharedMin, sumKeys), min(sharedMinF, sumKeysF)
	return a
}

// winCappedDemand is the most a perfect window limiter admits given the
// decisions asked per window (the key, floor(start / ruleWindow)) and
// principal: per window, each principal's demand capped at its tightest
// own level's limit, the sum capped at the shared level's. Tighter than
// the "allowed" column (the bound over the span, capped by the whole
// run's demand), which at an offered rate above the limit counts the
// demand of one window against the room of another. A decision is placed
// by its start; the store counts it at its Redis time or, admitted
// locally, at its local decision, a little later: near a boundary it may
// count in the next window, so this is an estimate within a few units.
func winCappedDemand(ls []level, winDemand map[int64][]uint64) float64 {
	var total float64
	for _, wd := range winDemand {
		shared, sum := math.Inf(1), 0.0
		for _, l := range ls {
			if l.shared {
				shared = min(shared, float64(l.rate))
			}
		}
		for _, n := range wd {
			k := float64(n)
			for _, l := range ls {
				if !l.shared {
					k = min(k, float64(l.rate))
				}
			}
			sum += k
		}
		total += min(shared, sum)
	}
	return total
}
