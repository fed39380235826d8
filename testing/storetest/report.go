package storetest

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
)

// reportStep is one call of Report with one report and what it must
// return.
type reportStep struct {
	what                      string
	advance                   time.Duration
	instance, seq, ack, since uint64
	units                     int64
	want                      tiers.ReportResult
}

// reportTrace runs the scripted Report trace on a bucket of limit l (10
// units, one per 100 ms; an absent bucket is full): first reports,
// an attempt sent twice, a reply lost and the report sent again with
// more units, an old attempt arriving late, debt, a second instance, and
// a resend with fewer units than the lost attempt counted. Every result
// is exact, and a take at the end checks what the bucket holds.
func reportTrace(t reporter, st tiers.Reporter, clk *clock.Fake, key string, l tiers.Limit) {
	ctx := context.Background()
	ok := func(counted, charged int64, acked uint64, rem int64) tiers.ReportResult {
		return tiers.ReportResult{Applied: true, Counted: counted, Charged: charged, Acked: acked, Remaining: rem}
	}
	steps := []reportStep{
		{what: "first report", instance: 1, seq: 1, ack: 0, units: 4, want: ok(4, 4, 4, 6)},
		{what: "the same attempt again", instance: 1, seq: 1, ack: 0, units: 4, want: tiers.ReportResult{Acked: 4, Remaining: 6}},
		// seq 2 is applied but its reply is lost: the instance sends its
		// 3 units again with 2 new ones, still from Acked 4.
		{what: "an attempt whose reply is lost", instance: 1, seq: 2, ack: 4, units: 3, want: ok(3, 3, 7, 3)},
		{what: "the lost attempt's units again, with 2 new", instance: 1, seq: 3, ack: 4, since: 2, units: 5, want: ok(2, 2, 9, 1)},
		{what: "the lost attempt arriving late", instance: 1, seq: 2, ack: 4, units: 3, want: tiers.ReportResult{Acked: 9, Remaining: 1}},
		{what: "more than the bucket holds: debt", instance: 1, seq: 4, ack: 9, units: 5, want: ok(5, 1, 14, 0)},
		{what: "another instance's first report", instance: 2, seq: 1, ack: 0, units: 2, want: ok(2, 0, 2, 0)},
		// 300 ms refill 3 units; the debt of 4 is reported again.
		{what: "the debt, after a refill of 3", advance: 300 * time.Millisecond, instance: 1, seq: 5, ack: 14, units: 4, want: ok(4, 3, 18, 0)},
		// seq 5's reply lost; the instance, capping what it resends,
		// sends 2 units from Acked 14: seq 5 counted 4 of them already,
		// and its debt of 1 (which the instance never learned) counts.
		{what: "a resend smaller than what the lost attempt counted", instance: 1, seq: 6, ack: 14, since: 5, units: 2, want: ok(1, 0, 18, 0)},
		{what: "the next report from the new Acked", advance: 500 * time.Millisecond, instance: 1, seq: 7, ack: 18, units: 1, want: ok(1, 1, 19, 4)},
		// The instance forgot the key and meets it again: it counts from
		// 0, and nothing of the old count is taken off.
		{what: "a key met again, counted afresh", instance: 1, seq: 8, ack: 0, units: 2, want: ok(2, 2, 2, 2)},
		// seq 9 never reached the store; seq 10 resends its unit.
		{what: "a resend whose lost attempt was never applied", instance: 1, seq: 10, ack: 2, since: 9, units: 1, want: ok(1, 1, 3, 1)},
	}
	var res [1]tiers.ReportResult
	for _, s := range steps {
		clk.Advance(s.advance)
		rep := []tiers.Report{{Bucket: tiers.Bucket{Key: key, Limit: l, Cost: s.units}, Instance: s.instance, Seq: s.seq, Acked: s.ack, Since: s.since}}
		if err := st.Report(ctx, rep, res[:]); err != nil {
			t.Fatalf("%s: Report: %v", s.what, err)
		}
		if res[0] != s.want {
			t.Errorf("%s (instance %d, seq %d, acked %d, since %d, %d units):\n got  %+v\n want %+v", s.what, s.instance, s.seq, s.ack, s.since, s.units, res[0], s.want)
		}
	}
	if r := take1(t, st, key, l, 1); !r.Allowed || r.Remaining != 0 {
		t.Errorf("take of the unit the reports left: %s", fmtResult(r))
	}
}

// reportMany checks that one call decides several reports each on its
// own: one finding no room does not stop another.
func reportMany(t reporter, st tiers.Reporter, prefix string, l tiers.Limit) {
	ctx := context.Background()
	if r := take1(t, st, prefix+"{full}", l, 10); !r.Allowed {
		t.Fatalf("take 10 of 10: %s", fmtResult(r))
	}
	reps := []tiers.Report{
		{Bucket: tiers.Bucket{Key: prefix + "{full}", Limit: l, Cost: 3}, Instance: 7, Seq: 1},
		{Bucket: tiers.Bucket{Key: prefix + "{tag}a", Limit: l, Cost: 3}, Instance: 7, Seq: 1},
		{Bucket: tiers.Bucket{Key: prefix + "{tag}b", Limit: l, Cost: 12}, Instance: 7, Seq: 1},
		{Bucket: tiers.Bucket{Key: prefix + "{tag}a", Limit: l, Cost: 1}, Instance: 8, Seq: 1},
	}
	res := make([]tiers.ReportResult, len(reps))
	if err := st.Report(ctx, reps, res); err != nil {
		t.Fatalf("Report: %v", err)
	}
	want := []tiers.ReportResult{
		{Applied: true, Counted: 3, Charged: 0, Acked: 3, Remaining: 0},
		{Applied: true, Counted: 3, Charged: 3, Acked: 3, Remaining: 7},
		{Applied: true, Counted: 12, Charged: 10, Acked: 12, Remaining: 0},
		{Applied: true, Counted: 1, Charged: 1, Acked: 1, Remaining: 6},
	}
	for i := range want {
		if res[i] != want[i] {
			t.Errorf("report %d (%s, instance %d):\n got  %+v\n want %+v", i, reps[i].Bucket.Key, reps[i].Instance, res[i], want[i])
		}
	}
}

// reportBadInput checks that every input tiers.ValidateReports refuses is
// refused with its error, and charges nothing.
func reportBadInput(t reporter, st tiers.Reporter, prefix string) {
	ctx := context.Background()
	tb := tiers.Limit{Algorithm: tiers.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}
	fw := tiers.Limit{Algorithm: tiers.FixedWindow, Rate: 10, Period: time.Second}
	good := tiers.Report{Bucket: tiers.Bucket{Key: prefix + "{a}", Limit: tb, Cost: 1}, Instance: 1, Seq: 1}
	if err := st.Report(ctx, nil, nil); err != nil {
		t.Errorf("empty Report: %v, want nil", err)
	}
	with := func(f func(r *tiers.Report)) []tiers.Report {
		r := good
		r.Bucket.Key = prefix + "{b}"
		f(&r)
		return []tiers.Report{good, r}
	}
	cases := []struct {
		name string
		reps []tiers.Report
		res  []tiers.ReportResult
	}{
		{"empty key", with(func(r *tiers.Report) { r.Bucket.Key = "" }), nil},
		{"negative units", with(func(r *tiers.Report) { r.Bucket.Cost = -1 }), nil},
		{"window algorithm", with(func(r *tiers.Report) { r.Bucket.Limit = fw }), nil},
		{"zero rate", with(func(r *tiers.Report) { r.Bucket.Limit.Rate = 0 }), nil},
		{"instance 0", with(func(r *tiers.Report) { r.Instance = 0 }), nil},
		{"same key and instance twice", []tiers.Report{good, good}, nil},
		{"res too short", with(func(*tiers.Report) {}), make([]tiers.ReportResult, 1)},
	}
	for _, c := range cases {
		res := c.res
		if res == nil {
			res = make([]tiers.ReportResult, len(c.reps))
		}
		want := tiers.ValidateReports(c.reps, res)
		if want == nil {
			t.Errorf("%s: tiers.ValidateReports accepts this case; the suite is out of date", c.name)
			continue
		}
		if err := st.Report(ctx, c.reps, res); err == nil {
			t.Errorf("%s: Report returned no error", c.name)
		} else if err.Error() != want.Error() {
			t.Errorf("%s: Report error:\n got  %s\n want %s (tiers.ValidateReports's)", c.name, err, want)
		}
	}
	if r := take1(t, st, prefix+"{a}", tb, 10); !r.Allowed {
		t.Errorf("a refused Report charged %s: %s", prefix+"{a}", fmtResult(r))
	}
}
