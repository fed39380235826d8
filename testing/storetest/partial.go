package storetest

import (
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// Vectors of partial grants (quota.Bucket.AtMost) and calendar windows
// (quota.Bucket.Span), derived by hand from the quota.Algorithm doc like
// Vectors. All quantities are µs unless a unit is written; t0 =
// clock.Epoch.

// PartialVectors: takes that ask for at most Cost units are granted the
// largest amount every AtMost bucket can give (its remaining as it
// stands), charged all or nothing at that amount; with nothing to give
// they deny as a take of one unit would.
var PartialVectors = []Vector{
	tokenBucketPartial(),
	gcraPartial(),
	slidingCounterPartial(),
	slidingLogPartial(),
	partialLevels(),
}

// atMost is a Step of one AtMost bucket.
func atMost(at time.Duration, key string, l quota.Limit, most int64, w Want) Step {
	return Step{At: at, Charges: []Charge{{Key: key, Limit: l, Cost: most, AtMost: true}}, Allowed: w.Allowed && w.RetryAfter == 0 && (w.Granted > 0 || most == 0), Want: []Want{w}}
}

func granted(g, rem int64, reset time.Duration) Want {
	return Want{Allowed: true, Remaining: rem, Reset: reset, Granted: g}
}

// tokenBucketPartial: 10/s burst 20.
func tokenBucketPartial() Vector {
	return Vector{Name: "token_bucket/partial", Steps: []Step{
		// R = 20: g = 15, tokens 5; reset ceil((20-5)*1e6/10) = 1.5 s.
		atMost(0, "k", tb10x20, 15, granted(15, 5, 1500*ms)),
		// R = 5: g = 5, tokens 0; reset 2 s.
		atMost(0, "k", tb10x20, 15, granted(5, 0, 2*s)),
		// R = 0: one unit is decided, and denied: retry ceil(1*1e6/10).
		atMost(0, "k", tb10x20, 15, deny(0, 100*ms, 2*s)),
		// 250 ms: tokens 2.5, R = 2: g = 2, tokens 0.5; reset
		// ceil(19.5*1e5) = 1.95 s.
		atMost(250*ms, "k", tb10x20, 15, granted(2, 0, 1950*ms)),
		// At most 0 reads: allowed, nothing granted.
		atMost(250*ms, "k", tb10x20, 0, granted(0, 0, 1950*ms)),
	}}
}

// gcraPartial: 10/s burst 5, T = 1e5, B*T = 5e5, S = 0.5.
func gcraPartial() Vector {
	return Vector{Name: "gcra/partial", Steps: []Step{
		// R = floor(500000.5/1e5) = 5: g = 3, tat1 = t+3e5; remaining
		// floor(200000.5/1e5) = 2, reset 300 ms.
		atMost(0, "k", gcra10x5, 3, granted(3, 2, 300*ms)),
		// R = 2: g = 2, tat1 = t+5e5 <= 500000.5; remaining 0, reset 500 ms.
		atMost(0, "k", gcra10x5, 3, granted(2, 0, 500*ms)),
		// R = 0: one unit denies: retry ceil(6e5 - 5e5 - 0.5) = 1e5.
		atMost(0, "k", gcra10x5, 3, deny(0, 100*ms, 500*ms)),
	}}
}

// slidingCounterPartial: 10 per 10 s window.
func slidingCounterPartial() Vector {
	return Vector{Name: "sliding_window_counter/partial", Steps: []Step{
		// R = 10: g = 4, curr 4; remaining 6, reset (w+2)W - now = 20 s.
		atMost(0, "k", swc10per10s, 4, granted(4, 6, 20*s)),
		// 10 s, e = 0: prev 4 weighs 4; R = 6: g = 6, curr 6; remaining 0,
		// reset 30 s - 10 s.
		atMost(10*s, "k", swc10per10s, 9, granted(6, 0, 20*s)),
		// 15 s, e = 5 s: weighted 4*0.5 + 6 = 8, R = 2: g = 2, curr 8;
		// remaining 0, reset 30 s - 15 s.
		atMost(15*s, "k", swc10per10s, 9, granted(2, 0, 15*s)),
		// weighted 10, R = 0: one unit denies; curr + 1 <= 10, so retry
		// ceil(1e7 - (1*1e7)/4) - 5e6 = 2.5 s.
		atMost(15*s, "k", swc10per10s, 9, deny(0, 2500*ms, 15*s)),
	}}
}

// slidingLogPartial: 5 per 10 s.
func slidingLogPartial() Vector {
	return Vector{Name: "sliding_window_log/partial", Steps: []Step{
		// R = 5: g = 3, three entries at 0; remaining 2, reset 10 s.
		atMost(0, "k", swl5per10s, 3, granted(3, 2, 10*s)),
		// 1 s: R = 2: g = 2 at 1 s; remaining 0, reset 1 s + 10 s - 1 s.
		atMost(1*s, "k", swl5per10s, 3, granted(2, 0, 10*s)),
		// 2 s: R = 0: one unit denies; the oldest entry (0) leaves at 10 s:
		// retry 8 s, reset newest (1 s) + 10 s - 2 s.
		atMost(2*s, "k", swl5per10s, 3, deny(0, 8*s, 9*s)),
	}}
}

// partialLevels: a tenant (fixed window, 5 per 10 s) and a user (token
// bucket 10/s burst 20) share one grant; a route bucket without AtMost
// is charged its own cost.
func partialLevels() Vector {
	lv := func(most, route int64) []Charge {
		cs := []Charge{
			{Key: "tenant", Limit: fw5per10s, Cost: most, AtMost: true},
			{Key: "user", Limit: tb10x20, Cost: most, AtMost: true},
		}
		if route > 0 {
			cs = append(cs, Charge{Key: "route", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 10, Period: 10 * s}, Cost: route})
		}
		return cs
	}
	return Vector{Name: "partial_levels", Steps: []Step{
		// tenant R = 5, user R = 20: g = 5 on both. Tenant: 5 counted,
		// remaining 0, reset 10 s; user: tokens 15, reset 500 ms.
		{At: 0, Charges: lv(8, 0), Allowed: true, Want: []Want{granted(5, 0, 10*s), granted(5, 15, 500*ms)}},
		// 1 s: tenant R = 0: one unit is decided and the tenant denies
		// (retry 9 s); the user would allow one (tokens back to 20, reset
		// 0); nothing is charged.
		{At: 1 * s, Charges: lv(8, 0), Want: []Want{deny(0, 9*s, 9*s), allow(20, 0)}},
		// 10 s: a new tenant window, R = 5; user R = 20: g = 5; the route
		// is charged its 3: remaining 7, reset 10 s; it is granted nothing.
		{At: 10 * s, Charges: lv(8, 3), Allowed: true, Want: []Want{granted(5, 0, 10*s), granted(5, 15, 500*ms), allow(7, 10*s)}},
		// 10 s: the tenant has nothing: denied with the route's 3 uncharged.
		{At: 10 * s, Charges: lv(8, 3), Want: []Want{deny(0, 10*s, 10*s), allow(15, 500*ms), allow(7, 10*s)}},
	}}
}

// CalendarVectors: fixed windows given as spans (a month, a 23-hour day),
// counted by their start and reset at their end.
var CalendarVectors = []Vector{
	calendarMonthEnd(),
	calendarShortDay(),
}

// calStep is a Step of one calendar window bucket.
func calStep(at time.Duration, l quota.Limit, sp quota.Span, cost int64, allowed bool, w Want) Step {
	return Step{At: at, Charges: []Charge{{Key: "plan", Limit: l, Cost: cost, Span: sp}}, Allowed: allowed, Want: []Want{w}}
}

// calendarMonthEnd: 3 a month (UTC), across the end of January 2026.
func calendarMonthEnd() Vector {
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: 31 * 24 * time.Hour}
	jan := quota.Span{Start: clock.Epoch, End: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)}
	feb := quota.Span{Start: jan.End, End: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	endJan := 31 * 24 * time.Hour
	return Vector{Name: "calendar/month_end", Steps: []Step{
		// one second before February: 2 of 3, reset at the month's end
		calStep(endJan-s, l, jan, 2, true, allow(1, s)),
		calStep(endJan-s, l, jan, 2, false, deny(1, s, s)),
		// February 1st, 00:00: a new window of 28 days
		calStep(endJan, l, feb, 2, true, allow(1, 28*24*time.Hour)),
		calStep(endJan+time.Hour, l, feb, 1, true, allow(0, 28*24*time.Hour-time.Hour)),
		calStep(endJan+time.Hour, l, feb, 1, false, deny(0, 28*24*time.Hour-time.Hour, 28*24*time.Hour-time.Hour)),
		// the same key, still February's window, at a cost of 0
		calStep(endJan+2*time.Hour, l, feb, 0, true, allow(0, 28*24*time.Hour-2*time.Hour)),
	}}
}

// calendarShortDay: 2 a day, on a day of 23 hours (Europe/Berlin's
// 2026-03-29, as UTC instants: 2026-03-28T23:00Z to 2026-03-29T22:00Z).
func calendarShortDay() Vector {
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 2, Period: 24 * time.Hour}
	day := quota.Span{Start: time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC), End: time.Date(2026, 3, 29, 22, 0, 0, 0, time.UTC)}
	next := quota.Span{Start: day.End, End: time.Date(2026, 3, 30, 22, 0, 0, 0, time.UTC)}
	at := day.Start.Sub(clock.Epoch)
	return Vector{Name: "calendar/short_day", Steps: []Step{
		calStep(at, l, day, 2, true, allow(0, 23*time.Hour)),
		// 22 hours in: one hour left of a 23-hour day
		calStep(at+22*time.Hour, l, day, 1, false, deny(0, time.Hour, time.Hour)),
		// the next day starts 23 hours after this one did
		calStep(at+23*time.Hour, l, next, 1, true, allow(1, 24*time.Hour)),
	}}
}
