package storetest

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// reportStep is one Report or Resolve call with one bucket and what it
// must return.
type reportStep struct {
	what          string
	advance       time.Duration
	resolve       bool
	instance, seq uint64
	units         int64
	want          quota.ReportResult
}

// reportTrace runs the scripted report trace on a bucket of limit l (10
// units, one per 100 ms; an absent bucket is full): a report, the same
// call sent twice, calls resolved as applied and as not applied (and the
// latter arriving late), debt, a second instance, the refill, and units
// given back (a negative report). Every
// result is exact, and a take at the end checks what the bucket holds.
func reportTrace(t reporter, st quota.Reporter, clk *clock.Fake, key string, l quota.Limit) {
	ctx := context.Background()
	applied := func(charged, rem int64) quota.ReportResult {
		return quota.ReportResult{Applied: true, Charged: charged, Remaining: rem}
	}
	none := quota.ReportResult{}
	steps := []reportStep{
		{what: "a report", instance: 1, seq: 1, units: 4, want: applied(4, 6)},
		{what: "the same call again", instance: 1, seq: 1, units: 4, want: none},
		{what: "resolving the applied call", resolve: true, instance: 1, seq: 1, units: 4, want: applied(4, 0)},
		{what: "resolving a call that never arrived", resolve: true, instance: 1, seq: 2, units: 3, want: none},
		{what: "that call arriving late", instance: 1, seq: 2, units: 3, want: none},
		{what: "more than the bucket holds: debt", instance: 1, seq: 3, units: 8, want: applied(6, 0)},
		{what: "resolving the call with debt", resolve: true, instance: 1, seq: 3, units: 8, want: applied(6, 0)},
		{what: "resolving the late call again", resolve: true, instance: 1, seq: 2, units: 3, want: none},
		{what: "another instance's call of the same number", instance: 2, seq: 1, units: 2, want: applied(0, 0)},
		{what: "after a refill of 3", advance: 300 * time.Millisecond, instance: 1, seq: 4, units: 1, want: applied(1, 2)},
		{what: "units given back", instance: 1, seq: 5, units: -3, want: applied(-3, 5)},
		{what: "given back beyond the capacity", instance: 1, seq: 6, units: -20, want: applied(-20, 10)},
		{what: "resolving a call that gave back", resolve: true, instance: 1, seq: 5, units: -3, want: applied(-3, 0)},
	}
	var res [1]quota.ReportResult
	for _, s := range steps {
		clk.Advance(s.advance)
		b := []quota.Bucket{{Key: key, Limit: l, Cost: s.units}}
		call, name := st.Report, "Report"
		if s.resolve {
			call, name = st.Resolve, "Resolve"
		}
		res[0] = quota.ReportResult{Applied: true, Charged: -1, Remaining: -1} // must be overwritten
		if err := call(ctx, s.instance, s.seq, b, res[:]); err != nil {
			t.Fatalf("%s: %s: %v", s.what, name, err)
		}
		if res[0] != s.want {
			t.Errorf("%s (%s instance %d, seq %d, %d units):\n got  %+v\n want %+v", s.what, name, s.instance, s.seq, s.units, res[0], s.want)
		}
	}
	if r := take1(t, st, key, l, 10); !r.Allowed || r.Remaining != 0 {
		t.Errorf("take of the 10 units the reports left: %s", fmtResult(r))
	}
}

// reportMany checks that one call decides its buckets each on its own
// (one finding no room does not stop another) and that Resolve tells what
// the call charged of each, with buckets in different hash tags (cluster
// slots).
func reportMany(t reporter, st quota.Reporter, prefix string, l quota.Limit) {
	ctx := context.Background()
	if r := take1(t, st, prefix+"{full}", l, 10); !r.Allowed {
		t.Fatalf("take 10 of 10: %s", fmtResult(r))
	}
	bs := []quota.Bucket{
		{Key: prefix + "{full}", Limit: l, Cost: 3},
		{Key: prefix + "{tag}a", Limit: l, Cost: 3},
		{Key: prefix + "{tag}b", Limit: l, Cost: 12},
		{Key: prefix + "{other}", Limit: l, Cost: 1},
		{Key: prefix + "{absent}", Limit: l, Cost: -4},
	}
	res := make([]quota.ReportResult, len(bs))
	if err := st.Report(ctx, 7, 1, bs, res); err != nil {
		t.Fatalf("Report: %v", err)
	}
	want := []quota.ReportResult{
		{Applied: true, Charged: 0, Remaining: 0},
		{Applied: true, Charged: 3, Remaining: 7},
		{Applied: true, Charged: 10, Remaining: 0},
		{Applied: true, Charged: 1, Remaining: 9},
		{Applied: true, Charged: -4, Remaining: 10}, // an absent bucket stays full
	}
	for i := range want {
		if res[i] != want[i] {
			t.Errorf("report %d (%s):\n got  %+v\n want %+v", i, bs[i].Key, res[i], want[i])
		}
	}
	if err := st.Resolve(ctx, 7, 1, bs, res); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	for i := range want {
		if w := (quota.ReportResult{Applied: true, Charged: want[i].Charged}); res[i] != w {
			t.Errorf("resolve %d (%s):\n got  %+v\n want %+v", i, bs[i].Key, res[i], w)
		}
	}
}

// reportBadInput checks that every input quota.ValidateReport refuses is
// refused by Report and Resolve with its error, and charges nothing.
func reportBadInput(t reporter, st quota.Reporter, prefix string) {
	ctx := context.Background()
	tb := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}
	fw := quota.Limit{Algorithm: quota.FixedWindow, Rate: 10, Period: time.Second}
	good := quota.Bucket{Key: prefix + "{a}", Limit: tb, Cost: 1}
	if err := st.Report(ctx, 1, 1, nil, nil); err != nil {
		t.Errorf("empty Report: %v, want nil", err)
	}
	with := func(f func(b *quota.Bucket)) []quota.Bucket {
		b := good
		b.Key = prefix + "{b}"
		f(&b)
		return []quota.Bucket{good, b}
	}
	cases := []struct {
		name     string
		instance uint64
		bs       []quota.Bucket
		res      []quota.ReportResult
	}{
		{"instance 0", 0, []quota.Bucket{good}, nil},
		{"empty key", 1, with(func(b *quota.Bucket) { b.Key = "" }), nil},
		{"units out of range", 1, with(func(b *quota.Bucket) { b.Cost = -quota.MaxSettle - 1 }), nil},
		{"window algorithm without Admitted", 1, with(func(b *quota.Bucket) { b.Limit = fw }), nil},
		{"Admitted on a token bucket", 1, with(func(b *quota.Bucket) { b.Admitted = time.Unix(1, 0) }), nil},
		{"Admitted before 1970", 1, with(func(b *quota.Bucket) { b.Limit, b.Admitted = fw, time.Unix(-1, 0) }), nil},
		{"Admitted outside its Span", 1, with(func(b *quota.Bucket) {
			b.Limit, b.Admitted = fw, time.Unix(10, 0)
			b.Span = quota.Span{Start: time.Unix(0, 0), End: time.Unix(10, 0)}
		}), nil},
		{"zero rate", 1, with(func(b *quota.Bucket) { b.Limit.Rate = 0 }), nil},
		{"same key twice", 1, []quota.Bucket{good, good}, nil},
		{"res too short", 1, with(func(*quota.Bucket) {}), make([]quota.ReportResult, 1)},
	}
	for seq, c := range cases {
		res := c.res
		if res == nil {
			res = make([]quota.ReportResult, len(c.bs))
		}
		want := quota.ValidateReport(c.instance, c.bs, res)
		if want == nil {
			t.Errorf("%s: quota.ValidateReport accepts this case; the suite is out of date", c.name)
			continue
		}
		for _, call := range []struct {
			name string
			f    func(context.Context, uint64, uint64, []quota.Bucket, []quota.ReportResult) error
		}{{"Report", st.Report}, {"Resolve", st.Resolve}} {
			if err := call.f(ctx, c.instance, uint64(seq+1), c.bs, res); err == nil {
				t.Errorf("%s: %s returned no error", c.name, call.name)
			} else if err.Error() != want.Error() {
				t.Errorf("%s: %s error:\n got  %s\n want %s (quota.ValidateReport's)", c.name, call.name, err, want)
			}
		}
	}
	if r := take1(t, st, prefix+"{a}", tb, 10); !r.Allowed {
		t.Errorf("a refused Report charged %s: %s", prefix+"{a}", fmtResult(r))
	}
}
