package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// windowStep is one call of a window report trace, at clock.Epoch + at:
// a Report or Resolve of units admitted at clock.Epoch + admitted, or a
// take of units (take), each with what it must return.
type windowStep struct {
	what     string
	at       time.Duration
	take     bool
	resolve  bool
	seq      uint64
	units    int64
	admitted time.Duration
	// want: of a report or resolve.
	want quota.ReportResult
	// allowed and remaining: of a take.
	allowed   bool
	remaining int64
}

// windowReports are the report traces of the window algorithms (rate 10
// per second; clock.Epoch is a whole second, so window k is [k s,
// (k+1) s) from it). Every expected value is derived from
// quota.Reporter's arithmetic in the comments beside it.
var windowReports = []struct {
	limit quota.Limit
	steps []windowStep
}{{
	limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 10, Period: time.Second},
	steps: []windowStep{
		// window 0: count 0 + 4
		{what: "into the current window", at: 100 * time.Millisecond, seq: 1, units: 4, admitted: 50 * time.Millisecond, want: applied(4, 6)},
		{what: "a take of what is left", at: 200 * time.Millisecond, take: true, units: 6, allowed: true, remaining: 0},
		// count 10 + 3 = 13: never denied, nothing remaining
		{what: "beyond the limit: the window's debt", at: 300 * time.Millisecond, seq: 2, units: 3, admitted: 150 * time.Millisecond, want: applied(3, 0)},
		{what: "a take in the window in debt", at: 400 * time.Millisecond, take: true, units: 1, allowed: false, remaining: 0},
		// now in window 1; window 0 is over: nothing charged, 10 left
		{what: "into a window that is over", at: 1100 * time.Millisecond, seq: 3, units: 5, admitted: 900 * time.Millisecond, want: applied(0, 10)},
		// admitted after now (a reporter's clock ahead): taken as now, window 1
		{what: "admitted after the store's now", at: 1100 * time.Millisecond, seq: 4, units: 2, admitted: 1200 * time.Millisecond, want: applied(2, 8)},
		// count 2 - 5: at most the 2 counted given back
		{what: "given back, more than counted", at: 1100 * time.Millisecond, seq: 5, units: -5, admitted: 1050 * time.Millisecond, want: applied(-2, 10)},
		{what: "given back to a window counting nothing", at: 1100 * time.Millisecond, seq: 6, units: -1, admitted: 1050 * time.Millisecond, want: applied(0, 10)},
		{what: "resolving the give-back", at: 1100 * time.Millisecond, resolve: true, seq: 5, units: -5, admitted: 1050 * time.Millisecond, want: applied(-2, 0)},
		{what: "resolving the report into a window that was over", at: 1100 * time.Millisecond, resolve: true, seq: 3, units: 5, admitted: 900 * time.Millisecond, want: applied(0, 0)},
		{what: "the same call again", at: 1100 * time.Millisecond, seq: 4, units: 2, admitted: 1200 * time.Millisecond, want: quota.ReportResult{}},
		{what: "a take of the whole window", at: 1500 * time.Millisecond, take: true, units: 10, allowed: true, remaining: 0},
	},
}, {
	limit: quota.Limit{Algorithm: quota.SlidingWindowCounter, Rate: 10, Period: time.Second},
	steps: []windowStep{
		// window 0: curr 4; weighted 4
		{what: "into the current window", at: 500 * time.Millisecond, seq: 1, units: 4, admitted: 400 * time.Millisecond, want: applied(4, 6)},
		// at 1.25 s, w = 1, e = 0.25 s: prev = 4 + 2 = 6, curr 0;
		// weighted = 6 * 0.75 = 4.5, remaining floor(5.5) = 5
		{what: "into the previous window", at: 1250 * time.Millisecond, seq: 2, units: 2, admitted: 900 * time.Millisecond, want: applied(2, 5)},
		// curr 1: weighted 5.5, remaining 4
		{what: "into the current window after", at: 1250 * time.Millisecond, seq: 3, units: 1, admitted: 1200 * time.Millisecond, want: applied(1, 4)},
		// 5.5 + 4 = 9.5 <= 10: allowed, curr 5, remaining floor(0.5) = 0
		{what: "a take of what is left", at: 1250 * time.Millisecond, take: true, units: 4, allowed: true, remaining: 0},
		// at 2.5 s, w = 2: prev = 5, curr 0, e = 0.5 s: weighted 2.5;
		// window 0 is over
		{what: "into a window that is over", at: 2500 * time.Millisecond, seq: 4, units: 4, admitted: 500 * time.Millisecond, want: applied(0, 7)},
		// prev = max(0, 5 - 3) = 2: weighted 1, remaining 9
		{what: "given back to the previous window", at: 2500 * time.Millisecond, seq: 5, units: -3, admitted: 1500 * time.Millisecond, want: applied(-3, 9)},
		{what: "resolving the give-back", at: 2500 * time.Millisecond, resolve: true, seq: 5, units: -3, admitted: 1500 * time.Millisecond, want: applied(-3, 0)},
		// 1 + 9 = 10 <= 10
		{what: "a take of what is left", at: 2500 * time.Millisecond, take: true, units: 9, allowed: true, remaining: 0},
		{what: "and no more", at: 2500 * time.Millisecond, take: true, units: 1, allowed: false, remaining: 0},
		// curr 9 + 3 = 12 (beyond the limit): weighted 1 + 12 = 13
		{what: "beyond the limit: the window's debt", at: 2500 * time.Millisecond, seq: 6, units: 3, admitted: 2400 * time.Millisecond, want: applied(3, 0)},
		// at 3.5 s: prev 12, weighted 12 * 0.5 = 6: the debt carried,
		// weighted (without it 4.5, and 5 remaining)
		{what: "the debt carried into the next window", at: 3500 * time.Millisecond, take: true, units: 5, allowed: false, remaining: 4},
	},
}, {
	limit: quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 10, Period: time.Second},
	steps: []windowStep{
		// 3 timestamps at 0.2 s
		{what: "into the window", at: 500 * time.Millisecond, seq: 1, units: 3, admitted: 200 * time.Millisecond, want: applied(3, 7)},
		// 7 timestamps at 0.5 s
		{what: "a take of what is left", at: 500 * time.Millisecond, take: true, units: 7, allowed: true, remaining: 0},
		// at 1.3 s every t <= 0.3 s is dropped: the 3 at 0.2 s; 7 left
		{what: "admitted when the window no longer counts it", at: 1300 * time.Millisecond, seq: 2, units: 2, admitted: 250 * time.Millisecond, want: applied(0, 3)},
		// 2 at 0.4 s: 9 counted
		{what: "admitted within the window", at: 1300 * time.Millisecond, seq: 3, units: 2, admitted: 400 * time.Millisecond, want: applied(2, 1)},
		// only the 2 at 0.4 s are at or before 0.45 s (the 7 at 0.5 s stay)
		{what: "given back, only what was recorded before", at: 1300 * time.Millisecond, seq: 4, units: -5, admitted: 450 * time.Millisecond, want: applied(-2, 3)},
		// 1 at 0.35 s: 8 counted
		{what: "admitted just within the window", at: 1300 * time.Millisecond, seq: 5, units: 1, admitted: 350 * time.Millisecond, want: applied(1, 2)},
		// at 1.36 s the one at 0.35 s is dropped: 7 counted
		{what: "a take after the reported unit aged out", at: 1360 * time.Millisecond, take: true, units: 3, allowed: true, remaining: 0},
		{what: "and no more", at: 1360 * time.Millisecond, take: true, units: 1, allowed: false, remaining: 0},
		{what: "resolving the give-back", at: 1360 * time.Millisecond, resolve: true, seq: 4, units: -5, admitted: 450 * time.Millisecond, want: applied(-2, 0)},
		// at 1.5 s + 1 µs the 7 at 0.5 s are dropped: the 3 at 1.36 s left
		{what: "a take after the take's units aged out", at: 1500*time.Millisecond + time.Microsecond, take: true, units: 7, allowed: true, remaining: 0},
		// 10 counted + 2 at 1.4 s: beyond the limit
		{what: "beyond the limit: the log's debt", at: 1500*time.Millisecond + time.Microsecond, seq: 6, units: 2, admitted: 1400 * time.Millisecond, want: applied(2, 0)},
		// at 2.37 s the 3 at 1.36 s are dropped: 7 + 2 = 9 counted (without
		// the debt 7, and 2 would remain)
		{what: "the debt aging out with its timestamps", at: 2370 * time.Millisecond, take: true, units: 1, allowed: true, remaining: 0},
	},
}}

func applied(charged, rem int64) quota.ReportResult {
	return quota.ReportResult{Applied: true, Charged: charged, Remaining: rem}
}

// reportWindowTrace runs the report trace of l's algorithm on key.
func reportWindowTrace(t reporter, st quota.Reporter, clk *clock.Fake, key string, l quota.Limit) {
	t.Helper()
	var steps []windowStep
	for _, w := range windowReports {
		if w.limit == l {
			steps = w.steps
		}
	}
	if steps == nil {
		t.Fatalf("no window report trace for %+v", l)
	}
	ctx := context.Background()
	var res [1]quota.ReportResult
	for i, s := range steps {
		clk.Set(clock.Epoch.Add(s.at))
		where := fmt.Sprintf("step %d, at %v: %s", i, s.at, s.what)
		if s.take {
			r := take1(t, st, key, l, s.units)
			if r.Allowed != s.allowed || r.Remaining != s.remaining {
				t.Errorf("%s: take of %d: %s, want allowed %v, remaining %d", where, s.units, fmtResult(r), s.allowed, s.remaining)
			}
			continue
		}
		b := []quota.Bucket{{Key: key, Limit: l, Cost: s.units, Admitted: clock.Epoch.Add(s.admitted)}}
		call, name := st.Report, "Report"
		if s.resolve {
			call, name = st.Resolve, "Resolve"
		}
		res[0] = quota.ReportResult{Applied: true, Charged: -1, Remaining: -1} // must be overwritten
		if err := call(ctx, 1, s.seq, b, res[:]); err != nil {
			t.Fatalf("%s: %s: %v", where, name, err)
		}
		if res[0] != s.want {
			t.Errorf("%s (%s seq %d, %d units admitted at %v):\n got  %+v\n want %+v", where, name, s.seq, s.units, s.admitted, res[0], s.want)
		}
	}
}

// reportWindowMany checks that one call charges buckets of every
// algorithm, each by its own arithmetic, in different hash tags.
func reportWindowMany(t reporter, st quota.Reporter, clk *clock.Fake, prefix string) {
	t.Helper()
	clk.Set(clock.Epoch.Add(1500 * time.Millisecond))
	adm := clock.Epoch.Add(1400 * time.Millisecond)
	tb := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}
	fw := quota.Limit{Algorithm: quota.FixedWindow, Rate: 10, Period: time.Second}
	sw := quota.Limit{Algorithm: quota.SlidingWindowCounter, Rate: 10, Period: time.Second}
	sl := quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 10, Period: time.Second}
	bs := []quota.Bucket{
		{Key: prefix + "{a}tb", Limit: tb, Cost: 12},
		{Key: prefix + "{a}fw", Limit: fw, Cost: 3, Admitted: adm},
		{Key: prefix + "{b}sw", Limit: sw, Cost: 4, Admitted: clock.Epoch.Add(900 * time.Millisecond)},
		{Key: prefix + "{c}sl", Limit: sl, Cost: 5, Admitted: adm},
		{Key: prefix + "{c}fw", Limit: fw, Cost: 6, Admitted: clock.Epoch.Add(900 * time.Millisecond)},
	}
	want := []quota.ReportResult{
		applied(10, 0), // a token bucket holds 10
		applied(3, 7),
		applied(4, 8), // the previous window: 4 * 0.5 = 2 weighted
		applied(5, 5),
		applied(0, 10), // window 0 is over
	}
	res := make([]quota.ReportResult, len(bs))
	if err := st.Report(context.Background(), 9, 1, bs, res); err != nil {
		t.Fatalf("Report: %v", err)
	}
	for i := range want {
		if res[i] != want[i] {
			t.Errorf("report %d (%s):\n got  %+v\n want %+v", i, bs[i].Key, res[i], want[i])
		}
	}
	if err := st.Resolve(context.Background(), 9, 1, bs, res); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	for i := range want {
		if w := (quota.ReportResult{Applied: true, Charged: want[i].Charged}); res[i] != w {
			t.Errorf("resolve %d (%s):\n got  %+v\n want %+v", i, bs[i].Key, res[i], w)
		}
	}
}

// reportCalendarTrace runs a report trace of a fixed window counted in
// calendar windows (quota.Bucket.Span) of unequal length: A = [0, 1.5 s)
// and B = [1.5 s, 2.5 s) from clock.Epoch, 10 units each. A report
// charges the Span it names while that Span is not over, whatever window
// is current.
func reportCalendarTrace(t reporter, st quota.Reporter, clk *clock.Fake, key string) {
	t.Helper()
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 10, Period: 24 * time.Hour}
	at := func(d time.Duration) time.Time { return clock.Epoch.Add(d) }
	spanA := quota.Span{Start: at(0), End: at(1500 * time.Millisecond)}
	spanB := quota.Span{Start: at(1500 * time.Millisecond), End: at(2500 * time.Millisecond)}
	ctx := context.Background()
	takeIn := func(what string, sp quota.Span, cost int64, allowed bool, rem int64) {
		t.Helper()
		var r [1]quota.Result
		ok, err := st.Take(ctx, []quota.Bucket{{Key: key, Limit: l, Cost: cost, Span: sp}}, r[:])
		if err != nil {
			t.Fatalf("%s: Take: %v", what, err)
		}
		if ok != allowed || r[0].Remaining != rem {
			t.Errorf("%s: take of %d: %s, want allowed %v, remaining %d", what, cost, fmtResult(r[0]), allowed, rem)
		}
	}
	report := func(what string, resolve bool, seq uint64, sp quota.Span, units int64, adm time.Duration, want quota.ReportResult) {
		t.Helper()
		var res [1]quota.ReportResult
		call := st.Report
		if resolve {
			call = st.Resolve
		}
		if err := call(ctx, 1, seq, []quota.Bucket{{Key: key, Limit: l, Cost: units, Span: sp, Admitted: at(adm)}}, res[:]); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := res[0]
		if want.Remaining < 0 { // not pinned: the state may have expired
			got.Remaining = want.Remaining
		}
		if got != want {
			t.Errorf("%s:\n got  %+v\n want %+v", what, res[0], want)
		}
	}
	clk.Set(at(500 * time.Millisecond))
	takeIn("a take in A", spanA, 3, true, 7)
	clk.Set(at(600 * time.Millisecond))
	report("a report into A, current", false, 1, spanA, 4, 200*time.Millisecond, applied(4, 3))
	clk.Set(at(1600 * time.Millisecond))
	// A is over: nothing charged (what it has left depends on whether its
	// state outlived its TTL, which the suite does not pin)
	report("a report into A, over", false, 2, spanA, 2, 1400*time.Millisecond, applied(0, -1))
	takeIn("a take in B", spanB, 1, true, 9)
	clk.Set(at(1700 * time.Millisecond))
	report("a report into B, current", false, 3, spanB, 5, 1600*time.Millisecond, applied(5, 4))
	report("resolving the report into A when it was over", true, 2, spanA, 2, 1400*time.Millisecond, applied(0, 0))
	takeIn("a take of what B has left", spanB, 4, true, 0)
	takeIn("and no more", spanB, 1, false, 0)
}
