package storetest

import (
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// Charge is one bucket of a Step's Take.
type Charge struct {
	// Key is the bucket's logical name; the runner prefixes it with a
	// prefix unique to the run, so vectors never collide in a shared store.
	Key string
	// Limit is the bucket's arithmetic.
	Limit quota.Limit
	// Cost is what the Take charges this bucket; in a Settle step, the
	// signed adjustment (negative: units given back).
	Cost int64
	// MaxWait is the bucket's quota.Bucket.MaxWait (WaitVectors).
	MaxWait time.Duration
	// AtMost is the bucket's quota.Bucket.AtMost (PartialVectors).
	AtMost bool
	// Span is the bucket's quota.Bucket.Span (CalendarVectors).
	Span quota.Span
}

// Want is the expected Result for one Charge.
type Want struct {
	// Allowed: this bucket alone would admit the cost.
	Allowed bool
	// Remaining after the Take: charged if the Take allowed, as it stood
	// if it denied.
	Remaining int64
	// Reset is the time until the bucket is full again, as the Take left it.
	Reset time.Duration
	// RetryAfter is 0 when Allowed, quota.Never for a cost above capacity.
	RetryAfter time.Duration
	// Wait is, for a bucket with MaxWait of a Take that charged, how long
	// until the units it booked are there (0: at once).
	Wait time.Duration
	// Granted is, for a bucket with AtMost of a Take that charged, the
	// amount charged (PartialVectors).
	Granted int64
}

// Step is one Take, or one Settle, at a point in fake time.
type Step struct {
	// At is the offset from clock.Epoch (2026-01-01T00:00:00Z, a whole hour,
	// so windows of 1 s, 10 s, 1 min and 1 h all start at At == 0).
	At time.Duration
	// Charges are the buckets of the Take, in order.
	Charges []Charge
	// Allowed is the verdict of the whole Take.
	Allowed bool
	// Want holds one expected Result per Charge; Limit is checked against
	// Charge.Limit.Capacity().
	Want []Want
	// Settle makes the step a quota.Settler's Settle of the Charges, each
	// Cost a signed adjustment, instead of a Take: it must succeed, and
	// Allowed and Want are unused (SettleVectors and WaitVectors).
	Settle bool
}

// Vector is a named sequence of Steps run on a fresh store, in order, with
// non-decreasing At.
type Vector struct {
	// Name names the subtest: algorithm/what.
	Name string
	// Steps run in order on one fresh store and clock.
	Steps []Step
}

const (
	ms = time.Millisecond
	s  = time.Second
	µs = time.Microsecond
)

// Limits used by the vectors.
var (
	// tb10x20: token bucket, 10 per second, burst 20. One token per 100 ms:
	// (elapsed*N)/P = (100000*10)/1000000 = 1 exactly.
	tb10x20 = quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}
	// tb3x2: token bucket, 3 per second, burst 2: P/N is not whole µs.
	tb3x2 = quota.Limit{Algorithm: quota.TokenBucket, Rate: 3, Period: time.Second, Burst: 2}
	// gcra10x5: GCRA, 10 per second, burst 5. T = P/N = 100000 µs,
	// B*T = 500000 µs.
	gcra10x5 = quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 5}
	// gcra3x2: GCRA, 3 per second, burst 2: T = fl(1e6/3) =
	// 333333.33333333331393 is not whole, B*T = 2T = 666666.66666666662786
	// (doubling is exact).
	gcra3x2 = quota.Limit{Algorithm: quota.GCRA, Rate: 3, Period: time.Second, Burst: 2}
	// gcra3x3: GCRA, 3 per second, burst 3: B*T = fl(3T) = 1e6 exactly
	// (3T = 999999.99999999994179 rounds to 1e6, ulp 2^-33 there).
	gcra3x3 = quota.Limit{Algorithm: quota.GCRA, Rate: 3, Period: time.Second, Burst: 3}
	// swc10per10s: sliding window counter, 10 per 10 s window. W = 1e7 µs.
	swc10per10s = quota.Limit{Algorithm: quota.SlidingWindowCounter, Rate: 10, Period: 10 * time.Second}
	// swl5per10s: sliding window log, 5 per 10 s. W = 1e7 µs.
	swl5per10s = quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 5, Period: 10 * time.Second}
	// fw5per10s: fixed window, 5 per 10 s window.
	fw5per10s = quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: 10 * time.Second}

	// Levels of the all-or-nothing vector, one per algorithm.
	tenantFW  = quota.Limit{Algorithm: quota.FixedWindow, Rate: 2, Period: time.Hour}
	userTB    = tb10x20
	apikeyGC  = gcra10x5
	ipSWL     = quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 100, Period: time.Minute}
	routeSWC  = quota.Limit{Algorithm: quota.SlidingWindowCounter, Rate: 100, Period: time.Minute}
	allLevels = []string{"tenant", "user", "apikey", "ip", "route"}
)

// one is a Step with a single bucket.
func one(at time.Duration, key string, l quota.Limit, cost int64, w Want) Step {
	return Step{At: at, Charges: []Charge{{Key: key, Limit: l, Cost: cost}}, Allowed: w.Allowed, Want: []Want{w}}
}

func allow(rem int64, reset time.Duration) Want {
	return Want{Allowed: true, Remaining: rem, Reset: reset}
}

func deny(rem int64, retry, reset time.Duration) Want {
	return Want{Remaining: rem, RetryAfter: retry, Reset: reset}
}

// Vectors is the shared table every Store must reproduce exactly. Each
// expected value is derived by hand from the arithmetic in the
// quota.Algorithm doc; the derivations are the comments beside them. All
// quantities below are µs unless a unit is written; t0 = clock.Epoch.
var Vectors = []Vector{
	tokenBucketBurstThenRate(),
	tokenBucketCost(),
	tokenBucketOddRate(),
	tokenBucketRefillCap(),
	gcraBurstThenRate(),
	gcraCost(),
	gcraOddRateCost2(),
	gcraOddRateBurst3(),
	gcraRelativePrecision(),
	swcBoundary(),
	swcCost(),
	swlBasic(),
	fixedWindowBoundaryBurst(),
	fixedWindowCost(),
	fixedWindowLoweredLimit(),
	swlLoweredLimit(),
	allOrNothing(),
}

// tokenBucketBurstThenRate: 10/s burst 20 allows exactly 20 at t0, then
// exactly 1 per 100 ms.
func tokenBucketBurstThenRate() Vector {
	var st []Step
	l := tb10x20
	// New bucket: tokens = 20. The k-th take at t0 (k = 1..20): elapsed 0,
	// tokens 21-k >= 1, allowed; tokens = 20-k; remaining = 20-k;
	// reset = ceil(((20-(20-k))*1e6)/10) = k*100000 = k*100 ms.
	for k := int64(1); k <= 20; k++ {
		st = append(st, one(0, "tb", l, 1, allow(20-k, time.Duration(k)*100*ms)))
	}
	// 21st at t0: tokens 0 < 1, denied; remaining 0;
	// retry = ceil(((1-0)*1e6)/10) = 100000; reset = ceil((20*1e6)/10) = 2 s.
	st = append(st, one(0, "tb", l, 1, deny(0, 100*ms, 2*s)))
	for k := 1; k <= 10; k++ {
		at := time.Duration(k) * 100 * ms
		// Last charge was 100 ms ago with tokens 0:
		// tokens = 0 + (100000*10)/1e6 = 1 -> allowed, tokens 0;
		// remaining 0; reset = ceil((20*1e6)/10) = 2 s.
		st = append(st, one(at, "tb", l, 1, allow(0, 2*s)))
		// Same instant: tokens 0 -> denied; retry 100 ms, reset 2 s.
		st = append(st, one(at, "tb", l, 1, deny(0, 100*ms, 2*s)))
		// 50 ms later (deny saves nothing, ts is still `at`):
		// tokens = (50000*10)/1e6 = 0.5 -> denied; remaining floor(0.5) = 0;
		// retry = ceil((0.5*1e6)/10) = 50000; reset = ceil((19.5*1e6)/10) = 1950000.
		st = append(st, one(at+50*ms, "tb", l, 1, deny(0, 50*ms, 1950*ms)))
	}
	// Last charge at 1 s with tokens 0. At 3 s: tokens = min(20, 0 +
	// (2e6*10)/1e6) = 20 -> allowed, 19 left, reset = ceil((1*1e6)/10) = 100 ms.
	st = append(st, one(3*s, "tb", l, 1, allow(19, 100*ms)))
	// At 3.15 s: tokens = min(20, 19 + (150000*10)/1e6) = min(20, 20.5) = 20
	// -> allowed, 19 left, reset = ceil((1*1e6)/10) = 100 ms. (The state's
	// TTL, its 100 ms reset, has passed too: a store that dropped it starts
	// a new bucket of 20 tokens, the same answer. token_bucket/refill_cap
	// tests the cap on live state.)
	st = append(st, one(3150*ms, "tb", l, 1, allow(19, 100*ms)))
	// At 100 s: tokens = min(20, 19 + 968.5) = 20 -> allowed, 19 left, reset 100 ms.
	st = append(st, one(100*s, "tb", l, 1, allow(19, 100*ms)))
	return Vector{Name: "token_bucket/burst_then_rate", Steps: st}
}

// tokenBucketCost: cost > 1, and cost > burst (never admissible).
func tokenBucketCost() Vector {
	l := tb10x20
	return Vector{Name: "token_bucket/cost", Steps: []Step{
		// tokens 20 -> 13; remaining 13; reset = ceil((7*1e6)/10) = 700 ms.
		one(0, "tbc", l, 7, allow(13, 700*ms)),
		// 13 -> 6; reset = ceil((14*1e6)/10) = 1.4 s.
		one(0, "tbc", l, 7, allow(6, 1400*ms)),
		// 7 > 6: denied; remaining 6; retry = ceil(((7-6)*1e6)/10) = 100 ms;
		// reset = ceil((14*1e6)/10) = 1.4 s.
		one(0, "tbc", l, 7, deny(6, 100*ms, 1400*ms)),
		// tokens = 6 + (100000*10)/1e6 = 7 -> allowed, 0 left; reset = 2 s.
		one(100*ms, "tbc", l, 7, allow(0, 2*s)),
		// cost 20 = burst, tokens 0: denied; retry = ceil((20*1e6)/10) = 2 s.
		one(100*ms, "tbc", l, 20, deny(0, 2*s, 2*s)),
		// 2 s after the last charge: tokens = min(20, 0 + 20) = 20 -> the whole
		// burst is admitted, 0 left, reset 2 s.
		one(2100*ms, "tbc", l, 20, allow(0, 2*s)),
		// cost 21 > capacity 20: denied, Never; remaining floor(0) = 0, reset 2 s.
		one(2100*ms, "tbc", l, 21, deny(0, quota.Never, 2*s)),
		// On a new bucket: tokens 20; cost 21 denied with Never; remaining 20;
		// reset = ceil(0) = 0.
		one(2100*ms, "tbc2", l, 21, deny(20, quota.Never, 0)),
		// Nothing was charged: cost 20 is admitted, 0 left, reset 2 s.
		one(2100*ms, "tbc2", l, 20, allow(0, 2*s)),
	}}
}

// tokenBucketRefillCap: the min(B, ...) cap on live state. At 10000 per
// second a token takes 100 µs, less than the 1 ms least TTL, so the state
// is still there when the refill overshoots the burst.
func tokenBucketRefillCap() Vector {
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10000, Period: time.Second, Burst: 2}
	return Vector{Name: "token_bucket/refill_cap", Steps: []Step{
		// tokens 2 -> 1; reset = ceil((1*1e6)/10000) = 100 µs (TTL 1 ms).
		one(0, "cap", l, 1, allow(1, 100*µs)),
		// now 150 µs: tokens = min(2, 1 + (150*10000)/1e6) = min(2, 2.5) = 2
		// -> 1; remaining 1; reset 100 µs.
		one(150*µs, "cap", l, 1, allow(1, 100*µs)),
		// 1 -> 0; reset = ceil((2*1e6)/10000) = 200 µs.
		one(150*µs, "cap", l, 1, allow(0, 200*µs)),
		// 0 < 1: retry = ceil((1*1e6)/10000) = 100 µs; reset 200 µs.
		one(150*µs, "cap", l, 1, deny(0, 100*µs, 200*µs)),
	}}
}

// tokenBucketOddRate: 3 per second, burst 2, so P/N = 333333.33... is not
// a whole number of µs and every retry-after and reset is rounded up. Each
// expected value is at least 1e-3 from an integer before ceil/floor, so
// IEEE rounding of the intermediate values cannot move it.
func tokenBucketOddRate() Vector {
	l := tb3x2
	return Vector{Name: "token_bucket/odd_rate", Steps: []Step{
		// tokens 2 -> 1; reset = ceil((1*1e6)/3) = ceil(333333.33) = 333334.
		one(0, "tb3", l, 1, allow(1, 333334*µs)),
		// 1 -> 0; reset = ceil((2*1e6)/3) = ceil(666666.67) = 666667.
		one(0, "tb3", l, 1, allow(0, 666667*µs)),
		// 0 < 1: retry = ceil((1*1e6)/3) = 333334; reset 666667.
		one(0, "tb3", l, 1, deny(0, 333334*µs, 666667*µs)),
		// now 333333: tokens = (333333*3)/1e6 = 0.999999 < 1, denied;
		// retry = ceil(((1-0.999999)*1e6)/3) = ceil(0.33) = 1;
		// reset = ceil(((2-0.999999)*1e6)/3) = ceil(333333.67) = 333334.
		one(333333*µs, "tb3", l, 1, deny(0, 1*µs, 333334*µs)),
		// now 500000: tokens = (500000*3)/1e6 = 1.5 -> allowed, 0.5 left;
		// remaining 0; reset = ceil((1.5*1e6)/3) = 500000.
		one(500*ms, "tb3", l, 1, allow(0, 500*ms)),
		// 0.5 < 1: retry = ceil((0.5*1e6)/3) = ceil(166666.67) = 166667.
		one(500*ms, "tb3", l, 1, deny(0, 166667*µs, 500*ms)),
		// now 1 s: tokens = min(2, 0.5 + (500000*3)/1e6) = 2; cost 2 -> 0;
		// reset = ceil((2*1e6)/3) = 666667.
		one(1*s, "tb3", l, 2, allow(0, 666667*µs)),
	}}
}

// gcraBurstThenRate: GCRA 10/s burst 5 follows its TAT definition.
// clock.Epoch is quota.GCRAEpoch, so t = now - GCRAEpoch is the step's At
// in µs, written t0+x below as in the other vectors. T and B*T are whole
// here and so is every tat1 - t, so the GCRASlack of 0.5 in the comparison
// never decides (x <= 5e5 + 0.5 iff x <= 5e5 for whole x), and ceil(x - 0.5)
// = x and floor((m + 0.5)/1e5) = floor(m/1e5) for whole x and m: the
// values below are those of the comparison without slack.
func gcraBurstThenRate() Vector {
	var st []Step
	l := gcra10x5
	// New bucket: tat = t0. The k-th take at t0: tat0 = t0+(k-1)*1e5,
	// tat1 = t0+k*1e5; allowed iff k*1e5 <= 5e5, i.e. k <= 5;
	// remaining = floor((5e5 - k*1e5)/1e5) = 5-k; reset = k*100 ms.
	for k := int64(1); k <= 5; k++ {
		st = append(st, one(0, "g", l, 1, allow(5-k, time.Duration(k)*100*ms)))
	}
	st = append(st,
		// tat0 = t0+5e5, tat1 = t0+6e5; 6e5 > 5e5 denied; remaining =
		// floor((5e5-5e5)/1e5) = 0; retry = ceil(6e5 - 5e5 - 0) = 100 ms;
		// reset = ceil(tat0 - now) = 500 ms.
		one(0, "g", l, 1, deny(0, 100*ms, 500*ms)),
		// now = t0+1e5: tat1 = t0+6e5; tat1-now = 5e5 <= 5e5 allowed;
		// remaining floor(0/1e5) = 0; reset = 6e5-1e5 = 500 ms.
		one(100*ms, "g", l, 1, allow(0, 500*ms)),
		// now = t0+1.5e5: tat = t0+6e5, tat1 = t0+7e5; 5.5e5 > 5e5 denied;
		// remaining = floor((5e5 - 4.5e5)/1e5) = floor(0.5) = 0;
		// retry = ceil(7e5 - 5e5 - 1.5e5) = 50 ms; reset = 6e5-1.5e5 = 450 ms.
		one(150*ms, "g", l, 1, deny(0, 50*ms, 450*ms)),
		// now = t0+2e5: tat1 = t0+7e5; 5e5 <= 5e5 allowed; remaining 0;
		// reset 500 ms.
		one(200*ms, "g", l, 1, allow(0, 500*ms)),
		// now = t0+4.5e5: tat1 = t0+8e5; 3.5e5 <= 5e5 allowed; remaining =
		// floor((5e5-3.5e5)/1e5) = floor(1.5) = 1; reset = 350 ms.
		one(450*ms, "g", l, 1, allow(1, 350*ms)),
		// now = t0+2e6 > tat = t0+8e5: tat0 = now, tat1 = now+1e5; allowed;
		// remaining 4; reset 100 ms.
		one(2*s, "g", l, 1, allow(4, 100*ms)),
	)
	return Vector{Name: "gcra/burst_then_rate", Steps: st}
}

// gcraCost: cost > 1 and cost > burst. As in gcraBurstThenRate, every
// quantity is whole, so GCRASlack changes none of the values below.
func gcraCost() Vector {
	l := gcra10x5
	return Vector{Name: "gcra/cost", Steps: []Step{
		// tat1 = t0 + 3*1e5; 3e5 <= 5e5 allowed; remaining floor(2e5/1e5) = 2;
		// reset 300 ms.
		one(0, "gc", l, 3, allow(2, 300*ms)),
		// tat0 = t0+3e5, tat1 = t0+6e5 > B*T: denied; remaining =
		// floor((5e5-3e5)/1e5) = 2; retry = ceil(6e5-5e5-0) = 100 ms; reset 300 ms.
		one(0, "gc", l, 3, deny(2, 100*ms, 300*ms)),
		// now = t0+1e5: tat1 = t0+6e5, 5e5 <= 5e5 allowed; remaining 0;
		// reset = 6e5-1e5 = 500 ms.
		one(100*ms, "gc", l, 3, allow(0, 500*ms)),
		// cost 6 > burst 5: Never; remaining = floor((5e5-(6e5-1e5))/1e5) = 0;
		// reset = ceil(tat0 - now) = 500 ms.
		one(100*ms, "gc", l, 6, deny(0, quota.Never, 500*ms)),
		// New bucket: tat0 = now; cost 6 Never; remaining floor(5e5/1e5) = 5;
		// reset 0.
		one(100*ms, "gc2", l, 6, deny(5, quota.Never, 0)),
		// Nothing was charged: cost 5 admitted (5e5 <= 5e5), 0 left, reset 500 ms.
		one(100*ms, "gc2", l, 5, allow(0, 500*ms)),
	}}
}

// gcraOddRateCost2: GCRA 3/s burst 2, where T is not whole. With absolute
// Unix-µs TATs (a double near 1.8e15 holds only quarters of a µs) a cost
// of 2 on a new bucket was denied: fl(now + 2T) - now = 666666.75 >
// 666666.67, with RetryAfter ceil(-0.08) = 0. Relative to GCRAEpoch, and
// with the slack, it is admitted. Exact doubles (T = 333333.33333333331393,
// B*T = 666666.66666666662786, tol = B*T + 0.5 = 666667.16666666662786):
func gcraOddRateCost2() Vector {
	l := gcra3x2
	return Vector{Name: "gcra/odd_rate_cost2", Steps: []Step{
		// t = 0, new bucket: tat0 = 0, tat1 = 0 + 2T = 666666.66666666662786
		// <= tol: allowed; remaining = floor((tol - tat1)/T) = floor(0.5/T)
		// = 0; reset = ceil(666666.67) = 666667.
		one(0, "go2", l, 2, allow(0, 666667*µs)),
		// t = 0: tat0 = 666666.67, tat1 = fl(tat0 + T) = fl(999999.99999999994179)
		// = 1e6 (the exact sum is half an ulp below 1e6 and rounds to even);
		// 1e6 > tol: denied; remaining = floor((tol - tat0)/T) = floor(0.5/T)
		// = 0; retry = ceil(1e6 - 0 - 666666.67 - 0.5) = ceil(333332.83) =
		// 333333; reset = ceil(tat0 - 0) = 666667.
		one(0, "go2", l, 1, deny(0, 333333*µs, 666667*µs)),
		// t = 333332: tat0 = 666666.67, tat1 = 1e6; tat1 - t = 666668 > tol:
		// denied; tat0 - t = 333334.67, so remaining =
		// floor((tol - 333334.67)/T) = floor(333332.5/T) = floor(0.9999975) = 0;
		// retry = ceil(666668 - 666666.67 - 0.5) = ceil(0.83) = 1;
		// reset = ceil(666666.67 - 333332) = ceil(333334.67) = 333335.
		one(333332*µs, "go2", l, 1, deny(0, 1*µs, 333335*µs)),
		// t = 333333, the retry-after above: tat1 - t = 1e6 - 333333 = 666667
		// <= tol: allowed (the exact-rational TAT would admit at
		// 333333.33; the 0.5 µs slack admits at the whole µs the retry-after
		// named). remaining = floor((tol - 666667)/T) = floor(0.17/T) = 0;
		// reset = ceil(666667) = 666667.
		one(333333*µs, "go2", l, 1, allow(0, 666667*µs)),
	}}
}

// gcraOddRateBurst3: GCRA 3/s burst 3 admits exactly its burst of three
// cost-1 takes at one instant. Exact doubles: T = 333333.33333333331393,
// B*T = fl(3T) = 1e6, tol = 1e6 + 0.5.
func gcraOddRateBurst3() Vector {
	l := gcra3x3
	return Vector{Name: "gcra/odd_rate_burst3", Steps: []Step{
		// t = 0, new: tat1 = T = 333333.33 <= tol: allowed; remaining =
		// floor((1000000.5 - 333333.33)/T) = floor(2.0000015) = 2;
		// reset = ceil(333333.33) = 333334.
		one(0, "go3", l, 1, allow(2, 333334*µs)),
		// tat1 = T + T = 666666.66666666662786 (exact): allowed; remaining =
		// floor(333333.83/T) = floor(1.0000015) = 1; reset 666667.
		one(0, "go3", l, 1, allow(1, 666667*µs)),
		// tat1 = fl(666666.67 + T) = fl(999999.99999999994179) = 1e6 <= tol:
		// allowed; remaining = floor(0.5/T) = 0; reset = ceil(1e6) = 1 s.
		one(0, "go3", l, 1, allow(0, 1*s)),
		// tat0 = 1e6, tat1 = fl(1e6 + T) = 1333333.33333333325572; tat1 - 0
		// > tol: denied; remaining floor(0.5/T) = 0;
		// retry = ceil(1333333.33 - 0 - 1e6 - 0.5) = ceil(333332.83) = 333333;
		// reset = ceil(1e6 - 0) = 1 s.
		one(0, "go3", l, 1, deny(0, 333333*µs, 1*s)),
	}}
}

// gcraRelativePrecision: GCRA 6/s burst 3, three cost-1 takes at one
// instant. The TAT relative to GCRAEpoch keeps T's fractions: an absolute
// Unix-µs TAT rounds each sum to a quarter µs (now + T + T + T - now =
// 500000.25) and would report a reset of 500001. Exact doubles:
// T = fl(1e6/6) = 166666.66666666665697, B*T = fl(3T) = 1e6/2 = 500000,
// tol = 500000.5.
func gcraRelativePrecision() Vector {
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 6, Period: time.Second, Burst: 3}
	return Vector{Name: "gcra/relative_precision", Steps: []Step{
		// t = 0, new: tat1 = T <= tol: allowed; remaining =
		// floor((500000.5 - T)/T) = floor(2.000003) = 2; reset = ceil(T) = 166667.
		one(0, "grp", l, 1, allow(2, 166667*µs)),
		// tat1 = 2T = 333333.33333333331393 (exact): remaining
		// floor(1.000003) = 1; reset 333334.
		one(0, "grp", l, 1, allow(1, 333334*µs)),
		// tat1 = fl(2T + T) = fl(499999.99999999997090) = 500000 <= tol:
		// allowed; remaining floor(0.5/T) = 0; reset = ceil(500000) = 500 ms.
		one(0, "grp", l, 1, allow(0, 500*ms)),
		// tat1 = fl(500000 + T) = 666666.66666666662786 > tol: denied;
		// remaining 0; retry = ceil(666666.67 - 0 - 500000 - 0.5) =
		// ceil(166666.17) = 166667; reset = ceil(500000 - 0) = 500 ms.
		one(0, "grp", l, 1, deny(0, 166667*µs, 500*ms)),
	}}
}

// swcBoundary: 10 at the end of one window and 10 at the start of the next
// must not all pass.
func swcBoundary() Vector {
	var st []Step
	l := swc10per10s
	// now = 9 s: w = w0, e = 9e6; new bucket prev = curr = 0. The k-th take:
	// weighted = k-1; allowed iff (k-1)+1 <= 10; remaining = 10-k;
	// reset = (w0+2)*W - now = 20 s - 9 s = 11 s.
	for k := int64(1); k <= 10; k++ {
		st = append(st, one(9*s, "swc", l, 1, allow(10-k, 11*s)))
	}
	// 11th: weighted 10, denied. curr+c = 11 > 10, so
	// retry = (W-e) + ceil(max(0, W - ((10-1)*W)/10)) = 1e6 + ceil(1e7-9e6)
	// = 2e6 = 2 s; remaining max(0, floor(10-10)) = 0; reset 11 s.
	st = append(st, one(9*s, "swc", l, 1, deny(0, 2*s, 11*s)))
	// now = 10 s: w = w0+1, e = 0; stored win = w-1 so prev = 10, curr = 0.
	// weighted = (10*(1e7-0))/1e7 + 0 = 10; 10+1 > 10: every take denied.
	// curr+c = 1 <= 10: retry = ceil(W - ((10-0-1)*W)/10) - 0 = 1e6 = 1 s;
	// remaining 0; reset (curr 0, prev > 0) = (w+1)*W - now = 10 s.
	for k := 0; k < 10; k++ {
		st = append(st, one(10*s, "swc", l, 1, deny(0, 1*s, 10*s)))
	}
	st = append(st,
		// now = 11 s: e = 1e6; weighted = (10*9e6)/1e7 = 9; allowed, curr 1;
		// remaining floor(10-9-1) = 0; reset = (w0+3)*W - now = 30-11 = 19 s.
		one(11*s, "swc", l, 1, allow(0, 19*s)),
		// weighted = 9+1 = 10, denied; curr+c = 2 <= 10:
		// retry = ceil(1e7 - ((10-1-1)*1e7)/10) - 1e6 = 2e6 - 1e6 = 1 s;
		// remaining 0; reset 19 s.
		one(11*s, "swc", l, 1, deny(0, 1*s, 19*s)),
		// now = 12 s: weighted = (10*8e6)/1e7 + 1 = 9; allowed, curr 2;
		// remaining 0; reset 30-12 = 18 s.
		one(12*s, "swc", l, 1, allow(0, 18*s)),
		// now = 25 s: w = w0+2, e = 5e6; stored win w0+1 = w-1: prev = 2,
		// curr = 0; weighted = (2*5e6)/1e7 = 1; allowed, curr 1;
		// remaining floor(10-1-1) = 8; reset = 40-25 = 15 s.
		one(25*s, "swc", l, 1, allow(8, 15*s)),
		// now = 45 s: w = w0+4; stored win w0+2 is older than w-1: prev =
		// curr = 0; allowed; remaining 9; reset = 60-45 = 15 s.
		one(45*s, "swc", l, 1, allow(9, 15*s)),
	)
	return Vector{Name: "sliding_window_counter/boundary", Steps: st}
}

// swcCost: cost > 1, both retry-after branches, and cost > limit.
func swcCost() Vector {
	l := swc10per10s
	return Vector{Name: "sliding_window_counter/cost", Steps: []Step{
		// e = 0, new: weighted 0; 4 <= 10 allowed; curr 4; remaining 6;
		// reset = 2W - 0 = 20 s.
		one(0, "swcc", l, 4, allow(6, 20*s)),
		// weighted 4; allowed; curr 8; remaining 2; reset 20 s.
		one(0, "swcc", l, 4, allow(2, 20*s)),
		// weighted 8; 12 > 10 denied. curr+c = 12 > 10:
		// retry = (1e7-0) + ceil(max(0, 1e7 - ((10-4)*1e7)/8)) = 1e7 + 2.5e6
		// = 12.5 s; remaining 2; reset 20 s.
		one(0, "swcc", l, 4, deny(2, 12500*ms, 20*s)),
		// now = 12.5 s: w = w0+1, e = 2.5e6, prev = 8, curr = 0;
		// weighted = (8*7.5e6)/1e7 = 6; 6+4 <= 10 allowed; curr 4;
		// remaining floor(10-6-4) = 0; reset = 30-12.5 = 17.5 s.
		one(12500*ms, "swcc", l, 4, allow(0, 17500*ms)),
		// weighted 10, cost 1 denied. curr+c = 5 <= 10:
		// retry = ceil(1e7 - ((10-4-1)*1e7)/8) - 2.5e6 = 3.75e6 - 2.5e6 = 1.25 s;
		// remaining 0; reset 17.5 s.
		one(12500*ms, "swcc", l, 1, deny(0, 1250*ms, 17500*ms)),
		// cost 11 > limit 10: Never; remaining 0; reset 17.5 s.
		one(12500*ms, "swcc", l, 11, deny(0, quota.Never, 17500*ms)),
		// now = 13.75 s: e = 3.75e6; weighted = (8*6.25e6)/1e7 + 4 = 9;
		// allowed, curr 5; remaining 0; reset = 30-13.75 = 16.25 s.
		one(13750*ms, "swcc", l, 1, allow(0, 16250*ms)),
		// New bucket: cost 11 Never; remaining 10; reset 0 (prev = curr = 0).
		one(13750*ms, "swcc2", l, 11, deny(10, quota.Never, 0)),
		// Nothing charged: cost 10 admitted; remaining 0; reset 30-13.75 s.
		one(13750*ms, "swcc2", l, 10, allow(0, 16250*ms)),
	}}
}

// swlBasic: sliding window log 5 per 10 s.
func swlBasic() Vector {
	l := swl5per10s
	return Vector{Name: "sliding_window_log/basic", Steps: []Step{
		// Log [] -> [0]; remaining 5-0-1 = 4; reset = 0+10-0 = 10 s.
		one(0, "swl", l, 1, allow(4, 10*s)),
		// [0,1]; remaining 3; reset = 1+10-1 = 10 s.
		one(1*s, "swl", l, 1, allow(3, 10*s)),
		// [0,1,2,2]; remaining 1; reset 10 s.
		one(2*s, "swl", l, 2, allow(1, 10*s)),
		// [0,1,2,2,3]; remaining 0; reset 10 s.
		one(3*s, "swl", l, 1, allow(0, 10*s)),
		// n = 5, 6 > 5 denied; k = 5+1-5 = 1: oldest 0 -> retry 0+10-4 = 6 s;
		// remaining 0; reset = newest 3 + 10 - 4 = 9 s.
		one(4*s, "swl", l, 1, deny(0, 6*s, 9*s)),
		// cost 3: k = 5+3-5 = 3: third oldest of [0,1,2,2,3] is 2 ->
		// retry 2+10-4 = 8 s.
		one(4*s, "swl", l, 3, deny(0, 8*s, 9*s)),
		// now 10 s: drop t <= 0 -> [1,2,2,3], n 4; allowed -> [1,2,2,3,10];
		// remaining 0; reset 10 s.
		one(10*s, "swl", l, 1, allow(0, 10*s)),
		// n 5 denied; k 1: oldest 1 -> retry 1+10-10 = 1 s; reset 10 s.
		one(10*s, "swl", l, 1, deny(0, 1*s, 10*s)),
		// now 11 s: drop t <= 1 -> [2,2,3,10], n 4; cost 2: 6 > 5 denied;
		// k = 4+2-5 = 1: oldest 2 -> retry 2+10-11 = 1 s; remaining 1;
		// reset 10+10-11 = 9 s.
		one(11*s, "swl", l, 2, deny(1, 1*s, 9*s)),
		// cost 1 allowed -> [2,2,3,10,11]; remaining 0; reset 10 s.
		one(11*s, "swl", l, 1, allow(0, 10*s)),
		// now 12 s: drop t <= 2 -> [3,10,11], n 3; cost 2 allowed ->
		// [3,10,11,12,12]; remaining 0; reset 10 s.
		one(12*s, "swl", l, 2, allow(0, 10*s)),
		// cost 6 > limit 5: Never; remaining 5-5 = 0; reset 12+10-12 = 10 s.
		one(12*s, "swl", l, 6, deny(0, quota.Never, 10*s)),
		// now 40 s: every timestamp <= 30 s dropped; n 0; cost 5 allowed;
		// remaining 0; reset 10 s.
		one(40*s, "swl", l, 5, allow(0, 10*s)),
		// New bucket: cost 6 Never; remaining 5; reset 0 (empty log).
		one(40*s, "swl2", l, 6, deny(5, quota.Never, 0)),
	}}
}

// fixedWindowBoundaryBurst documents the fixed window's price: L at the end
// of one window plus L at the start of the next, 2L within one second.
func fixedWindowBoundaryBurst() Vector {
	var st []Step
	l := fw5per10s
	// now 9 s, window [0,10 s): count k-1 -> allowed for k <= 5;
	// remaining 5-k; reset = 10-9 = 1 s.
	for k := int64(1); k <= 5; k++ {
		st = append(st, one(9*s, "fw", l, 1, allow(5-k, 1*s)))
	}
	// count 5: denied; retry = reset = 1 s; remaining 0.
	st = append(st, one(9*s, "fw", l, 1, deny(0, 1*s, 1*s)))
	// now 10 s: new window, count 0: five more allowed (10 in one second,
	// the documented 2x); reset 10 s.
	for k := int64(1); k <= 5; k++ {
		st = append(st, one(10*s, "fw", l, 1, allow(5-k, 10*s)))
	}
	st = append(st,
		one(10*s, "fw", l, 1, deny(0, 10*s, 10*s)),
		// 1 µs before the next window: retry = reset = 1 µs.
		one(20*s-1*µs, "fw", l, 1, deny(0, 1*µs, 1*µs)),
		// now 20 s: new window; remaining 4; reset 10 s.
		one(20*s, "fw", l, 1, allow(4, 10*s)),
	)
	return Vector{Name: "fixed_window/boundary_burst", Steps: st}
}

// fixedWindowCost: cost > 1 and cost > limit.
func fixedWindowCost() Vector {
	l := fw5per10s
	return Vector{Name: "fixed_window/cost", Steps: []Step{
		// count 0+3 <= 5: remaining 2; reset 10 s.
		one(0, "fwc", l, 3, allow(2, 10*s)),
		// 3+3 > 5: denied; retry = (w+1)*W - now = 10 s; remaining 2.
		one(0, "fwc", l, 3, deny(2, 10*s, 10*s)),
		// 3+2 <= 5: remaining 0.
		one(0, "fwc", l, 2, allow(0, 10*s)),
		// cost 6 > limit 5: Never; remaining 0; reset 10 s.
		one(0, "fwc", l, 6, deny(0, quota.Never, 10*s)),
		// New bucket: cost 6 Never; remaining 5; reset 10 s (always to the
		// window's end).
		one(0, "fwc2", l, 6, deny(5, quota.Never, 10*s)),
		// Nothing charged: cost 5 admitted; remaining 0.
		one(0, "fwc2", l, 5, allow(0, 10*s)),
	}}
}

// fixedWindowLoweredLimit: the same key under a higher, then a lower
// limit keeps its count (state is kept by key), which can exceed the new
// limit: remaining is max(0, L - count), never negative.
func fixedWindowLoweredLimit() Vector {
	hi := fw5per10s
	lo := quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: 10 * time.Second}
	return Vector{Name: "fixed_window/lowered_limit", Steps: []Step{
		// Limit 5: count 0+5 <= 5, allowed; remaining 0; reset 10 s.
		one(0, "fwl", hi, 5, allow(0, 10*s)),
		// now 1 s, limit 3: count 5, 5+1 > 3 denied; remaining max(0, 3-5)
		// = 0 (not -2); retry = reset = (w+1)*W - now = 10-1 = 9 s.
		one(1*s, "fwl", lo, 1, deny(0, 9*s, 9*s)),
		// now 10 s: new window, count 0; cost 3 <= 3 allowed; remaining 0;
		// reset 10 s.
		one(10*s, "fwl", lo, 3, allow(0, 10*s)),
	}}
}

// swlLoweredLimit: as fixedWindowLoweredLimit, for the sliding window log.
func swlLoweredLimit() Vector {
	hi := swl5per10s
	lo := quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 3, Period: 10 * time.Second}
	return Vector{Name: "sliding_window_log/lowered_limit", Steps: []Step{
		// Limit 5: log [] -> [0,0,0,0,0]; remaining 0; reset 0+10-0 = 10 s.
		one(0, "swll", hi, 5, allow(0, 10*s)),
		// now 1 s, limit 3: drop t <= -9 s, none; n 5; 5+1 > 3 denied;
		// remaining max(0, 3-5) = 0 (not -2); k = 5+1-3 = 3: the third oldest
		// is 0 -> retry 0+10-1 = 9 s; reset = newest 0 + 10 - 1 = 9 s.
		one(1*s, "swll", lo, 1, deny(0, 9*s, 9*s)),
		// now 10 s: drop t <= 0 -> [], n 0; cost 3 allowed -> [10,10,10];
		// remaining 0; reset 10 s.
		one(10*s, "swll", lo, 3, allow(0, 10*s)),
	}}
}

// allOrNothing: when one level denies, every other level keeps exactly
// what it had. Five levels, one per algorithm, all at t0 (no refill):
// tenant FW 2/1h, user TB 10/s b20, apikey GCRA 10/s b5, ip SWL 100/1m,
// route SWC 100/1m.
func allOrNothing() Vector {
	lim := map[string]quota.Limit{"tenant": tenantFW, "user": userTB, "apikey": apikeyGC, "ip": ipSWL, "route": routeSWC}
	take := func(keys []string, cost map[string]int64, allowed bool, want map[string]Want) Step {
		st := Step{Allowed: allowed}
		for _, k := range keys {
			c := int64(1)
			if v, ok := cost[k]; ok {
				c = v
			}
			st.Charges = append(st.Charges, Charge{Key: k, Limit: lim[k], Cost: c})
			st.Want = append(st.Want, want[k])
		}
		return st
	}
	reversed := []string{"user", "apikey", "ip", "route", "tenant"}
	// After two allowed takes of cost 1 at t0:
	//   tenant: count 2, remaining 0, reset 1 h (window end);
	//   user:   tokens 18, remaining 18, reset ceil((2*1e6)/10) = 200 ms;
	//   apikey: tat = t0+2e5, remaining floor((5e5-2e5)/1e5) = 3, reset 200 ms;
	//   ip:     log [t0,t0], remaining 98, reset t0+60 s - t0 = 60 s;
	//   route:  curr 2, remaining floor(100-2) = 98, reset (w+2)*W - now = 120 s.
	// A denied take leaves all of them so, and reports them so (Remaining
	// is "as it stands" when the take denies).
	untouched := map[string]Want{
		"tenant": deny(0, time.Hour, time.Hour),
		"user":   allow(18, 200*ms),
		"apikey": allow(3, 200*ms),
		"ip":     allow(98, 60*s),
		"route":  allow(98, 120*s),
	}
	userDenies := map[string]Want{
		// tokens 18 < 19: retry = ceil(((19-18)*1e6)/10) = 100 ms.
		"user":   deny(18, 100*ms, 200*ms),
		"apikey": allow(3, 200*ms),
		"ip":     allow(98, 60*s),
		"route":  allow(98, 120*s),
	}
	return Vector{Name: "all_or_nothing", Steps: []Step{
		// First take: tenant count 1 (remaining 1, reset 1 h); user tokens 19
		// (reset 100 ms); apikey tat t0+1e5 (remaining 4, reset 100 ms); ip 99
		// (60 s); route 99 (120 s).
		take(allLevels, nil, true, map[string]Want{
			"tenant": allow(1, time.Hour), "user": allow(19, 100*ms), "apikey": allow(4, 100*ms),
			"ip": allow(99, 60*s), "route": allow(99, 120*s),
		}),
		take(allLevels, nil, true, map[string]Want{
			"tenant": allow(0, time.Hour), "user": allow(18, 200*ms), "apikey": allow(3, 200*ms),
			"ip": allow(98, 60*s), "route": allow(98, 120*s),
		}),
		// Tenant count 2+1 > 2: denied, retry to the window end, 1 h.
		take(allLevels, nil, false, untouched),
		take(reversed, nil, false, untouched),
		// Another level denies: user cost 19 > 18 tokens.
		take([]string{"user", "apikey", "ip", "route"}, map[string]int64{"user": 19}, false, userDenies),
		// Probe: the four lower levels alone, cost 1: exactly one less than
		// after the second take, so the three denied takes charged nothing.
		// user 17 (reset 300 ms), apikey 2 (reset 300 ms), ip 97, route 97.
		take([]string{"user", "apikey", "ip", "route"}, nil, true, map[string]Want{
			"user": allow(17, 300*ms), "apikey": allow(2, 300*ms), "ip": allow(97, 60*s), "route": allow(97, 120*s),
		}),
		// And the tenant is as it was: count 2, denied.
		take([]string{"tenant"}, nil, false, map[string]Want{"tenant": deny(0, time.Hour, time.Hour)}),
	}}
}

// The give-back vectors, part of SettleVectors: Settle with a negative
// cost, the one way a caller gives back units taken ahead and not spent
// (a cancelled wait, an estimate above the actual cost), on TokenBucket
// and GCRA, with the arithmetic of the quota.Algorithm doc ("Settlement")
// for d = -c (c the units given back, now the step's time):
//
//	TokenBucket: tokens = min(B, tokens + (elapsed * N) / P), ts = now; tokens = min(B, tokens + c)
//	GCRA:        tat = max(t, tat - c * T)
//
// An absent bucket is full and a give-back leaves it so; a cost of 0
// gives nothing.

// tokenBucketGiveBack: give-backs return exactly their units on top of
// the refill, capped at the burst; a give-back to an absent bucket does
// nothing.
func tokenBucketGiveBack() Vector {
	l := tb10x20
	return Vector{Name: "token_bucket/give_back", Steps: []Step{
		// tokens 20 -> 5; reset = ceil((15*1e6)/10) = 1.5 s.
		one(0, "tbr", l, 15, allow(5, 1500*ms)),
		// elapsed 0: tokens 5 -> min(20, 5 + 4) = 9.
		settleStep(0, Charge{Key: "tbr", Limit: l, Cost: -4}),
		// 10 > 9: denied; remaining 9; retry = ceil(((10-9)*1e6)/10) = 100 ms;
		// reset = ceil((11*1e6)/10) = 1.1 s.
		one(0, "tbr", l, 10, deny(9, 100*ms, 1100*ms)),
		// 9 -> 0; reset 2 s.
		one(0, "tbr", l, 9, allow(0, 2*s)),
		// 500 ms later: the refill first, tokens = 0 + (500000*10)/1e6 = 5,
		// then 5 + 3 = 8, ts = 500 ms. (Without the refill: 3.)
		settleStep(500*ms, Charge{Key: "tbr", Limit: l, Cost: -3}),
		// 9 > 8: denied; remaining 8; retry = ceil((1*1e6)/10) = 100 ms;
		// reset = ceil((12*1e6)/10) = 1.2 s.
		one(500*ms, "tbr", l, 9, deny(8, 100*ms, 1200*ms)),
		// 8 -> 0; reset 2 s.
		one(500*ms, "tbr", l, 8, allow(0, 2*s)),
		// 1 s later: refill to 0 + (1e6*10)/1e6 = 10, then min(20, 10 + 15)
		// = 20: the cap.
		settleStep(1500*ms, Charge{Key: "tbr", Limit: l, Cost: -15}),
		// exactly the burst is there: 20 -> 0, reset 2 s ...
		one(1500*ms, "tbr", l, 20, allow(0, 2*s)),
		// ... and no more: retry 100 ms, reset 2 s.
		one(1500*ms, "tbr", l, 1, deny(0, 100*ms, 2*s)),
		// An absent bucket is full; the give-back leaves it so (it does not
		// become a bucket of 5 tokens).
		settleStep(1500*ms, Charge{Key: "tbr_new", Limit: l, Cost: -5}),
		one(1500*ms, "tbr_new", l, 20, allow(0, 2*s)),
		one(1500*ms, "tbr_new", l, 1, deny(0, 100*ms, 2*s)),
	}}
}

// gcraGiveBack: give-backs move the TAT back by c*T, never below now. T = 1e5,
// B*T = 5e5, tol = 500000.5; every value is whole, so the slack only shows
// in the 0.5 of retry-afters, ceil(x - 0.5) = x (see gcraBurstThenRate).
func gcraGiveBack() Vector {
	l := gcra10x5
	return Vector{Name: "gcra/give_back", Steps: []Step{
		// t = 0: tat1 = 3e5; remaining = floor((500000.5 - 3e5)/1e5) = 2;
		// reset 300 ms.
		one(0, "gr", l, 3, allow(2, 300*ms)),
		// tat = max(0, 3e5 - 2*1e5) = 1e5.
		settleStep(0, Charge{Key: "gr", Limit: l, Cost: -2}),
		// tat1 = 1e5 + 5e5 = 6e5 > tol: denied; remaining =
		// floor((500000.5 - 1e5)/1e5) = 4; retry = ceil(6e5 - 500000.5) =
		// 100 ms; reset = 1e5 = 100 ms.
		one(0, "gr", l, 5, deny(4, 100*ms, 100*ms)),
		// tat1 = 5e5: allowed, remaining 0, reset 500 ms.
		one(0, "gr", l, 4, allow(0, 500*ms)),
		// t = 2e5: tat = max(2e5, 5e5 - 5*1e5 = 0) = 2e5: bounded below by
		// now, a full bucket.
		settleStep(200*ms, Charge{Key: "gr", Limit: l, Cost: -5}),
		// exactly the burst: tat1 = 7e5, 7e5 - 2e5 = 5e5 <= tol; remaining 0;
		// reset 500 ms ...
		one(200*ms, "gr", l, 5, allow(0, 500*ms)),
		// ... and no more: tat1 = 8e5, 6e5 > tol; remaining 0; retry =
		// ceil(6e5 - 500000.5) = 100 ms; reset = 7e5 - 2e5 = 500 ms.
		one(200*ms, "gr", l, 1, deny(0, 100*ms, 500*ms)),
		// t = 3e5: tat = max(3e5, 7e5 - 1e5) = 6e5.
		settleStep(300*ms, Charge{Key: "gr", Limit: l, Cost: -1}),
		// tat1 = 1e6, 7e5 > tol: denied; remaining =
		// floor((500000.5 - 3e5)/1e5) = 2; retry = ceil(7e5 - 500000.5) =
		// 200 ms; reset = 6e5 - 3e5 = 300 ms. (Without the give-back: 1 left.)
		one(300*ms, "gr", l, 4, deny(2, 200*ms, 300*ms)),
		// tat1 = 8e5, 5e5 <= tol: remaining 0, reset 500 ms.
		one(300*ms, "gr", l, 2, allow(0, 500*ms)),
		// An absent bucket is full; the give-back leaves it so.
		settleStep(300*ms, Charge{Key: "gr_new", Limit: l, Cost: -3}),
		// new: tat1 = t + 5e5, allowed; remaining 0; reset 500 ms ...
		one(300*ms, "gr_new", l, 5, allow(0, 500*ms)),
		// ... then tat1 = t + 6e5: denied, retry 100 ms, reset 500 ms.
		one(300*ms, "gr_new", l, 1, deny(0, 100*ms, 500*ms)),
	}}
}

// gcraGiveBackOddRate: GCRA 3/s burst 2, where T = fl(1e6/3) =
// 333333.33333333331393 is not whole, pins the doubles of a give-back:
// 2T - T = T exactly, and then T + 2T = fl(3T) = 1e6 (see gcra3x3).
func gcraGiveBackOddRate() Vector {
	l := gcra3x2
	return Vector{Name: "gcra/give_back_odd_rate", Steps: []Step{
		// tat1 = 2T = 666666.66666666662786 <= tol; remaining 0; reset 666667.
		one(0, "gro", l, 2, allow(0, 666667*µs)),
		// tat = max(0, 2T - 1*T) = T.
		settleStep(0, Charge{Key: "gro", Limit: l, Cost: -1}),
		// tat1 = fl(T + 2T) = 1e6 > tol = 666667.16666666662786: denied;
		// remaining = floor((tol - T)/T) = floor(1.0000015) = 1; retry =
		// ceil(1e6 - 666666.66666666662786 - 0.5) = ceil(333332.83333333337)
		// = 333333; reset = ceil(T) = 333334.
		one(0, "gro", l, 2, deny(1, 333333*µs, 333334*µs)),
		// tat1 = T + T = 2T: allowed; remaining floor(0.5/T) = 0; reset
		// 666667.
		one(0, "gro", l, 1, allow(0, 666667*µs)),
	}}
}

// giveBackHierarchy: one Settle giving back to several buckets (a token
// bucket, a GCRA given 0, an absent bucket) gives back exactly the units of each; on a
// Redis Cluster the buckets sit in different slots, except in the
// same_hash_tag run.
func giveBackHierarchy() Vector {
	tb, gc := tb10x20, gcra10x5
	return Vector{Name: "give_back/hierarchy", Steps: []Step{
		// tb 20 -> 12, reset = ceil((8*1e6)/10) = 800 ms; gc tat1 = 2e5,
		// remaining floor((500000.5 - 2e5)/1e5) = 3, reset 200 ms.
		{At: 0, Charges: []Charge{{Key: "tb", Limit: tb, Cost: 8}, {Key: "gc", Limit: gc, Cost: 2}}, Allowed: true,
			Want: []Want{allow(12, 800*ms), allow(3, 200*ms)}},
		// tb 12 -> 17; gc unchanged (cost 0); "none" is absent: nothing.
		settleStep(0, Charge{Key: "tb", Limit: tb, Cost: -5}, Charge{Key: "gc", Limit: gc, Cost: 0}, Charge{Key: "none", Limit: tb, Cost: -3}),
		// tb alone would allow 17 (remaining 17 as it stands, reset =
		// ceil((3*1e6)/10) = 300 ms); gc denies 4: tat1 = 6e5 > tol,
		// remaining 3, retry = ceil(6e5 - 500000.5) = 100 ms, reset 200 ms
		// (the give-back of 0 changed nothing). Nothing is charged.
		{At: 0, Charges: []Charge{{Key: "tb", Limit: tb, Cost: 17}, {Key: "gc", Limit: gc, Cost: 4}}, Allowed: false,
			Want: []Want{allow(17, 300*ms), deny(3, 100*ms, 200*ms)}},
		// tb denies 18 > 17: retry = ceil((1*1e6)/10) = 100 ms, reset
		// 300 ms; gc alone would allow 1 (remaining 3 as it stands).
		{At: 0, Charges: []Charge{{Key: "tb", Limit: tb, Cost: 18}, {Key: "gc", Limit: gc, Cost: 1}}, Allowed: false,
			Want: []Want{deny(17, 100*ms, 300*ms), allow(3, 200*ms)}},
		// tb 17 -> 0, reset 2 s; gc tat1 = 5e5, remaining 0, reset 500 ms.
		{At: 0, Charges: []Charge{{Key: "tb", Limit: tb, Cost: 17}, {Key: "gc", Limit: gc, Cost: 3}}, Allowed: true,
			Want: []Want{allow(0, 2*s), allow(0, 500*ms)}},
		// the absent bucket is still full
		one(0, "none", tb, 20, allow(0, 2*s)),
	}}
}
