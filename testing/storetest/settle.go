package storetest

import (
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// settleStep is a Step that settles the charges (signed costs) at at.
func settleStep(at time.Duration, charges ...Charge) Step {
	return Step{At: at, Charges: charges, Settle: true}
}

// waitOne is a Step with a single bucket that may wait up to mw.
func waitOne(at time.Duration, key string, l quota.Limit, cost int64, mw time.Duration, w Want) Step {
	return Step{At: at, Charges: []Charge{{Key: key, Limit: l, Cost: cost, MaxWait: mw}}, Allowed: w.Allowed, Want: []Want{w}}
}

// waited is the Want of a bucket that allowed by booking units ahead.
func waited(rem int64, reset, wait time.Duration) Want {
	return Want{Allowed: true, Remaining: rem, Reset: reset, Wait: wait}
}

// SettleVectors is the shared table of quota.Settler's Settle: takes,
// settlements (signed: a charge of more units, a refund, a debt beyond
// the bucket) and takes again, for every algorithm, with the arithmetic
// of the quota.Algorithm doc ("Settlement"): token bucket and GCRA carry
// debt that later takes wait out, the window algorithms settle in the
// window current at settlement and never count below 0, an absent bucket
// is full (a refund leaves it absent); and the give-back vectors (see
// tokenBucketGiveBack), Settle of negative costs on token bucket and GCRA
// buckets, the one way a caller gives units back. Run checks them on
// every Store that implements quota.Settler.
var SettleVectors = []Vector{
	tokenBucketSettle(),
	gcraSettle(),
	fixedWindowSettle(),
	slidingCounterSettle(),
	slidingLogSettle(),
	settleHierarchy(),
	tokenBucketGiveBack(),
	gcraGiveBack(),
	gcraGiveBackOddRate(),
	giveBackHierarchy(),
}

// tokenBucketSettle: 10/s burst 20, one token per 100 ms.
func tokenBucketSettle() Vector {
	l := tb10x20
	return Vector{Name: "token_bucket/settle", Steps: []Step{
		// 20 -> 15; reset = ceil((5*1e6)/10) = 500 ms.
		one(0, "tbs", l, 5, allow(15, 500*ms)),
		// charge 10 more: 15 - 10 = 5.
		settleStep(0, Charge{Key: "tbs", Limit: l, Cost: 10}),
		// 6 > 5: denied; retry = ceil(((6-5)*1e6)/10) = 100 ms; reset =
		// ceil((15*1e6)/10) = 1.5 s.
		one(0, "tbs", l, 6, deny(5, 100*ms, 1500*ms)),
		// refund 3: 5 + 3 = 8.
		settleStep(0, Charge{Key: "tbs", Limit: l, Cost: -3}),
		// exactly 8 are there: 8 -> 0, reset 2 s.
		one(0, "tbs", l, 8, allow(0, 2*s)),
		// debt: 0 - 15 = -15 tokens.
		settleStep(0, Charge{Key: "tbs", Limit: l, Cost: 15}),
		// at 1 s: -15 + (1e6*10)/1e6 = -5: denied with 0 remaining (never
		// negative); retry = ceil(((1-(-5))*1e6)/10) = 600 ms; reset =
		// ceil(((20-(-5))*1e6)/10) = 2.5 s.
		one(1*s, "tbs", l, 1, deny(0, 600*ms, 2500*ms)),
		// at 1.6 s: -15 + 16 = 1: the debt is paid; 1 -> 0, reset 2 s.
		one(1600*ms, "tbs", l, 1, allow(0, 2*s)),
		// a refund is capped at the burst: min(20, 0 + 100) = 20.
		settleStep(1600*ms, Charge{Key: "tbs", Limit: l, Cost: -100}),
		one(1600*ms, "tbs", l, 20, allow(0, 2*s)),
		one(1600*ms, "tbs", l, 1, deny(0, 100*ms, 2*s)),
		// An absent bucket is full: a refund leaves it so ...
		settleStep(1600*ms, Charge{Key: "tbs_new", Limit: l, Cost: -5}),
		one(1600*ms, "tbs_new", l, 20, allow(0, 2*s)),
		// ... and a charge starts it from full: 20 - 5 = 15, so 16 is
		// denied (retry ceil((1*1e6)/10) = 100 ms, reset ceil((5*1e6)/10) =
		// 500 ms).
		settleStep(1600*ms, Charge{Key: "tbs_new2", Limit: l, Cost: 5}),
		one(1600*ms, "tbs_new2", l, 16, deny(15, 100*ms, 500*ms)),
	}}
}

// gcraSettle: 10/s burst 5: T = 1e5, B*T = 5e5, tol = 500000.5.
func gcraSettle() Vector {
	l := gcra10x5
	return Vector{Name: "gcra/settle", Steps: []Step{
		// tat1 = 2e5; remaining floor((500000.5 - 2e5)/1e5) = 3; reset 200 ms.
		one(0, "gs", l, 2, allow(3, 200*ms)),
		// charge 2 more: tat = max(2e5, 0) + 2*1e5 = 4e5.
		settleStep(0, Charge{Key: "gs", Limit: l, Cost: 2}),
		// tat1 = 6e5 > tol: denied; remaining floor((500000.5 - 4e5)/1e5) =
		// 1; retry = ceil(6e5 - 500000.5) = 100 ms; reset 400 ms.
		one(0, "gs", l, 2, deny(1, 100*ms, 400*ms)),
		// refund 1: tat = max(0, 4e5 - 1e5) = 3e5.
		settleStep(0, Charge{Key: "gs", Limit: l, Cost: -1}),
		// tat1 = 5e5 <= tol: remaining 0, reset 500 ms.
		one(0, "gs", l, 2, allow(0, 500*ms)),
		// debt: tat = max(5e5, 0) + 10*1e5 = 1.5e6.
		settleStep(0, Charge{Key: "gs", Limit: l, Cost: 10}),
		// t = 5e5: tat1 = 1.6e6, 1.1e6 > tol: denied; remaining 0; retry =
		// ceil(1.1e6 - 500000.5) = 600 ms; reset = 1.5e6 - 5e5 = 1 s.
		one(500*ms, "gs", l, 1, deny(0, 600*ms, 1*s)),
		// t = 1.1e6: tat1 = 1.6e6, 5e5 <= tol: remaining 0, reset 500 ms.
		one(1100*ms, "gs", l, 1, allow(0, 500*ms)),
		// a refund never moves the TAT before now: max(1.1e6, 1.6e6 - 1e7).
		settleStep(1100*ms, Charge{Key: "gs", Limit: l, Cost: -100}),
		one(1100*ms, "gs", l, 5, allow(0, 500*ms)),
		// an absent bucket stays full after a refund
		settleStep(1100*ms, Charge{Key: "gs_new", Limit: l, Cost: -3}),
		one(1100*ms, "gs_new", l, 5, allow(0, 500*ms)),
	}}
}

// fixedWindowSettle: 5 per 10 s window; every settlement counts in the
// window current at settlement.
func fixedWindowSettle() Vector {
	l := fw5per10s
	return Vector{Name: "fixed_window/settle", Steps: []Step{
		// count 2; remaining 3; reset 10 s.
		one(0, "fws", l, 2, allow(3, 10*s)),
		// charge 2 more at 1 s: count 4.
		settleStep(1*s, Charge{Key: "fws", Limit: l, Cost: 2}),
		// 4 + 2 > 5: denied; remaining 1; retry and reset 9 s.
		one(1*s, "fws", l, 2, deny(1, 9*s, 9*s)),
		// refund 3: count 1.
		settleStep(1*s, Charge{Key: "fws", Limit: l, Cost: -3}),
		// 1 + 4 = 5: remaining 0, reset 9 s.
		one(1*s, "fws", l, 4, allow(0, 9*s)),
		// debt at 2 s: count 8.
		settleStep(2*s, Charge{Key: "fws", Limit: l, Cost: 3}),
		one(2*s, "fws", l, 1, deny(0, 8*s, 8*s)),
		// a refund stops at 0: max(0, 8 - 20) = 0.
		settleStep(2*s, Charge{Key: "fws", Limit: l, Cost: -20}),
		one(2*s, "fws", l, 5, allow(0, 8*s)),
		// A refund in the next window (whose count is 0) gives nothing
		// back (the count does not go below 0): 0 + 3, remaining 2.
		settleStep(10*s, Charge{Key: "fws", Limit: l, Cost: -5}),
		one(10*s, "fws", l, 3, allow(2, 10*s)),
		// debt in this window: 3 + 4 = 7; a refund of 1 leaves 6, still
		// beyond the limit: denied until the window ends.
		settleStep(10*s, Charge{Key: "fws", Limit: l, Cost: 4}),
		settleStep(10*s, Charge{Key: "fws", Limit: l, Cost: -1}),
		one(15*s, "fws", l, 1, deny(0, 5*s, 5*s)),
		// and no further: the next window starts empty.
		one(20*s, "fws", l, 5, allow(0, 10*s)),
	}}
}

// slidingCounterSettle: 10 per 10 s window, W = 1e7 µs.
func slidingCounterSettle() Vector {
	l := swc10per10s
	return Vector{Name: "sliding_window_counter/settle", Steps: []Step{
		// w = 0: curr 4; remaining floor(10 - 0 - 4) = 6; reset (w+2)W = 20 s.
		one(0, "swcs", l, 4, allow(6, 20*s)),
		// charge 3 more: curr 7.
		settleStep(0, Charge{Key: "swcs", Limit: l, Cost: 3}),
		// 7 + 4 > 10: denied; remaining 3; curr + c = 11 > L, so retry =
		// (W - e) + ceil(W - ((L - c) * W) / curr) = 1e7 + ceil(1e7 -
		// 6e7/7) = 1e7 + ceil(1428571.43) = 11428572 µs; reset 20 s.
		one(0, "swcs", l, 4, deny(3, 11428572*µs, 20*s)),
		// refund 5: curr 2.
		settleStep(0, Charge{Key: "swcs", Limit: l, Cost: -5}),
		// 2 + 8 = 10: curr 10, remaining 0, reset 20 s.
		one(0, "swcs", l, 8, allow(0, 20*s)),
		// debt at 5 s: curr 15.
		settleStep(5*s, Charge{Key: "swcs", Limit: l, Cost: 5}),
		// w = 1, e = 0: prev 15, weighted 15: denied; remaining 0; curr + c
		// = 1 <= L: retry = ceil(W - ((L - 0 - 1) * W) / prev) - e =
		// ceil(1e7 - 9e7/15) = 4 s; reset (w+1)W - now = 10 s.
		one(10*s, "swcs", l, 1, deny(0, 4*s, 10*s)),
		// e = 4e6: weighted 15 * 6e6 / 1e7 = 9; 9 + 1 <= 10: curr 1,
		// remaining 0, reset (w+2)W - now = 16 s.
		one(14*s, "swcs", l, 1, allow(0, 16*s)),
		// refund 1: curr 0; the same take passes again.
		settleStep(14*s, Charge{Key: "swcs", Limit: l, Cost: -1}),
		one(14*s, "swcs", l, 1, allow(0, 16*s)),
		// w = 2: curr 1 became prev, curr is 0: a refund gives nothing
		// back. weighted = 1: 1 + 10 > 10, denied; remaining 9; curr + c
		// = 10 <= L: retry = ceil(1e7 - (0 * 1e7) / 1) - 0 = 10 s; reset
		// (w+1)W - now = 10 s.
		settleStep(20*s, Charge{Key: "swcs", Limit: l, Cost: -10}),
		one(20*s, "swcs", l, 10, deny(9, 10*s, 10*s)),
	}}
}

// slidingLogSettle: 5 per 10 s; a charge records timestamps at now, a
// refund drops the newest.
func slidingLogSettle() Vector {
	l := swl5per10s
	return Vector{Name: "sliding_window_log/settle", Steps: []Step{
		// {0 x2}: remaining 3; reset = 0 + 10 s - 0 = 10 s.
		one(0, "swls", l, 2, allow(3, 10*s)),
		// charge 2 more at 1 s: {0 x2, 1 s x2}.
		settleStep(1*s, Charge{Key: "swls", Limit: l, Cost: 2}),
		// 4 + 2 > 5: denied; remaining 1; retry: the (4+2-5) = 1st oldest,
		// 0, + 10 s - 1 s = 9 s; reset = 1 s + 10 s - 1 s = 10 s.
		one(1*s, "swls", l, 2, deny(1, 9*s, 10*s)),
		// refund 3 at 2 s: the newest go: {0 x1}.
		settleStep(2*s, Charge{Key: "swls", Limit: l, Cost: -3}),
		// 1 + 4 = 5: {0, 2 s x4}; remaining 0; reset 2 s + 10 s - 2 s = 10 s.
		one(2*s, "swls", l, 4, allow(0, 10*s)),
		// denied: retry = 0 + 10 s - 2 s = 8 s; reset 10 s.
		one(2*s, "swls", l, 1, deny(0, 8*s, 10*s)),
		// debt at 3 s: {0, 2 s x4, 3 s}.
		settleStep(3*s, Charge{Key: "swls", Limit: l, Cost: 1}),
		// at 10 s the 0 drops (t <= now - W): 5 left, denied; retry: the
		// 1st oldest, 2 s, + 10 s - 10 s = 2 s; reset 3 s + 10 s - 10 s = 3 s.
		one(10*s, "swls", l, 1, deny(0, 2*s, 3*s)),
		// at 12 s the 2 s go: {3 s}: 1 + 1 <= 5; remaining 3; reset 10 s.
		one(12*s, "swls", l, 1, allow(3, 10*s)),
		// an absent log stays empty after a refund
		settleStep(12*s, Charge{Key: "swls_new", Limit: l, Cost: -2}),
		one(12*s, "swls_new", l, 5, allow(0, 10*s)),
	}}
}

// settleHierarchy: one Settle of a token bucket (+6), a GCRA (-1) and a
// fixed window (+1) adjusts each by exactly its own amount; on a Redis
// Cluster the buckets sit in different slots, except in the
// same_hash_tag run.
func settleHierarchy() Vector {
	tb, gc, fw := tb10x20, gcra10x5, fw5per10s
	return Vector{Name: "settle/hierarchy", Steps: []Step{
		// tb 20 -> 16 (reset 400 ms); gc tat 2e5 (remaining 3, reset
		// 200 ms); fw count 2 (remaining 3, reset 10 s).
		{At: 0, Charges: []Charge{{Key: "tb", Limit: tb, Cost: 4}, {Key: "gc", Limit: gc, Cost: 2}, {Key: "fw", Limit: fw, Cost: 2}}, Allowed: true,
			Want: []Want{allow(16, 400*ms), allow(3, 200*ms), allow(3, 10*s)}},
		// tb 10; gc tat max(0, 2e5 - 1e5) = 1e5; fw 3.
		settleStep(0, Charge{Key: "tb", Limit: tb, Cost: 6}, Charge{Key: "gc", Limit: gc, Cost: -1}, Charge{Key: "fw", Limit: fw, Cost: 1}),
		// each has exactly room for this: tb 10 -> 0 (reset 2 s); gc tat1 =
		// 5e5 <= tol (remaining 0, reset 500 ms); fw 3 + 2 = 5 (reset 10 s).
		{At: 0, Charges: []Charge{{Key: "tb", Limit: tb, Cost: 10}, {Key: "gc", Limit: gc, Cost: 4}, {Key: "fw", Limit: fw, Cost: 2}}, Allowed: true,
			Want: []Want{allow(0, 2*s), allow(0, 500*ms), allow(0, 10*s)}},
		// and no more: tb retry 100 ms; gc tat1 = 6e5, retry
		// ceil(6e5 - 500000.5) = 100 ms; fw retry 10 s.
		{At: 0, Charges: []Charge{{Key: "tb", Limit: tb, Cost: 1}, {Key: "gc", Limit: gc, Cost: 1}, {Key: "fw", Limit: fw, Cost: 1}}, Allowed: false,
			Want: []Want{deny(0, 100*ms, 2*s), deny(0, 100*ms, 500*ms), deny(0, 10*s, 10*s)}},
	}}
}

// WaitVectors is the shared table of waiting takes (quota.Bucket.MaxWait,
// TokenBucket and GCRA): a bucket that would deny admits the cost by
// booking units that arrive within MaxWait, reporting the wait in
// Result.Wait, so that later takes queue behind it; a wait beyond MaxWait
// denies as without it; a Take denied by another bucket books nothing; a
// refund (Settle of a negative cost: a cancelled wait) gives the booked
// units back. Run checks them on every Store; the steps that settle are
// skipped, with the rest of their vector, for a Store that is not a
// quota.Settler.
var WaitVectors = []Vector{
	tokenBucketWait(),
	gcraWait(),
	waitHierarchy(),
}

// tokenBucketWait: 10/s burst 20, one token per 100 ms, waits of up to
// 300 ms.
func tokenBucketWait() Vector {
	l, mw := tb10x20, 300*ms
	return Vector{Name: "token_bucket/wait", Steps: []Step{
		// 20 -> 0 at once; reset 2 s.
		waitOne(0, "tbw", l, 20, mw, allow(0, 2*s)),
		// 0 tokens: wait = ceil(((2-0)*1e6)/10) = 200 ms <= 300 ms: booked,
		// tokens -2; remaining 0; reset ceil(((20+2)*1e6)/10) = 2.2 s.
		waitOne(0, "tbw", l, 2, mw, waited(0, 2200*ms, 200*ms)),
		// behind it: wait = ceil(((1+2)*1e6)/10) = 300 ms; tokens -3.
		waitOne(0, "tbw", l, 1, mw, waited(0, 2300*ms, 300*ms)),
		// 400 ms > 300 ms: denied as without a wait; retry 400 ms; reset
		// 2.3 s; nothing booked.
		waitOne(0, "tbw", l, 1, mw, deny(0, 400*ms, 2300*ms)),
		// at 150 ms: -3 + 1.5 = -1.5; wait = ceil((2.5*1e6)/10) = 250 ms.
		waitOne(150*ms, "tbw", l, 1, mw, waited(0, 2250*ms, 250*ms)),
		// a cost above the burst never waits: denied, RetryAfter Never.
		waitOne(150*ms, "tbw", l, 21, mw, deny(0, quota.Never, 2250*ms)),
		// without MaxWait the same take is denied: retry
		// ceil(((1+2.5)*1e6)/10) = 350 ms.
		one(150*ms, "tbw", l, 1, deny(0, 350*ms, 2250*ms)),
		// a cancelled waiter gives its unit back: -2.5 + 1 = -1.5 ...
		settleStep(150*ms, Charge{Key: "tbw", Limit: l, Cost: -1}),
		// ... and the next waits 250 ms, not 350 ms.
		waitOne(150*ms, "tbw", l, 1, mw, waited(0, 2250*ms, 250*ms)),
	}}
}

// gcraWait: 10/s burst 5 (T = 1e5, B*T = 5e5, tol = 500000.5), waits of
// up to 250 ms.
func gcraWait() Vector {
	l, mw := gcra10x5, 250*ms
	return Vector{Name: "gcra/wait", Steps: []Step{
		// tat1 = 5e5 <= tol: at once; remaining 0, reset 500 ms.
		waitOne(0, "gw", l, 5, mw, allow(0, 500*ms)),
		// tat1 = 6e5: wait = ceil(6e5 - 500000.5) = 100 ms: booked;
		// remaining 0; reset 600 ms.
		waitOne(0, "gw", l, 1, mw, waited(0, 600*ms, 100*ms)),
		// tat1 = 8e5: wait ceil(299999.5) = 300 ms > 250 ms: denied; retry
		// 300 ms; reset 600 ms.
		waitOne(0, "gw", l, 2, mw, deny(0, 300*ms, 600*ms)),
		// tat1 = 7e5: 200 ms.
		waitOne(0, "gw", l, 1, mw, waited(0, 700*ms, 200*ms)),
		// t = 1e5: tat1 = 8e5: wait ceil(7e5 - 500000.5) = 200 ms; reset 700 ms.
		waitOne(100*ms, "gw", l, 1, mw, waited(0, 700*ms, 200*ms)),
		// two cancelled waiters: tat = max(1e5, 8e5 - 2e5) = 6e5 ...
		settleStep(100*ms, Charge{Key: "gw", Limit: l, Cost: -2}),
		// ... the next waits ceil(7e5 - 1e5 - 500000.5) = 100 ms; reset 600 ms.
		waitOne(100*ms, "gw", l, 1, mw, waited(0, 600*ms, 100*ms)),
	}}
}

// waitHierarchy: a waiting bucket "a" (300 ms) with a bucket "b" that does
// not wait, both 10/s burst 20: the Take waits for a; b denies the whole
// Take, which then books nothing on a.
func waitHierarchy() Vector {
	l := tb10x20
	a := func(cost int64) Charge { return Charge{Key: "a", Limit: l, Cost: cost, MaxWait: 300 * ms} }
	b := func(cost int64) Charge { return Charge{Key: "b", Limit: l, Cost: cost} }
	return Vector{Name: "wait/hierarchy", Steps: []Step{
		// a 20 -> 0 (reset 2 s), b 20 -> 10 (reset 1 s).
		{At: 0, Charges: []Charge{a(20), b(10)}, Allowed: true, Want: []Want{allow(0, 2*s), allow(10, 1*s)}},
		// a waits 100 ms (tokens -1, reset 2.1 s); b 10 -> 9 (reset 1.1 s).
		{At: 0, Charges: []Charge{a(1), b(1)}, Allowed: true, Want: []Want{waited(0, 2100*ms, 100*ms), allow(9, 1100*ms)}},
		// b denies 10 > 9 (retry 100 ms, reset 1.1 s): a alone would admit
		// by waiting (Allowed, nothing booked: Wait 0, reset as it stands,
		// 2.1 s).
		{At: 0, Charges: []Charge{a(1), b(10)}, Allowed: false, Want: []Want{allow(0, 2100*ms), deny(9, 100*ms, 1100*ms)}},
		// a still holds -1 tokens: 2 more wait ceil(3e5) = 300 ms (had the
		// denied Take booked its unit, 400 ms would deny this).
		{At: 0, Charges: []Charge{a(2)}, Allowed: true, Want: []Want{waited(0, 2300*ms, 300*ms)}},
	}}
}
