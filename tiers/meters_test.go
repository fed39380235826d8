package tiers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reqctx"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// meterPolicy: one tenant's plan priced per meter: 60 requests a minute
// (the default meter, one per request, never settled), 1 M input tokens
// and 200 k output tokens a day, each charged an estimate at admission
// (2000 and 1000) and settled with what the handler reported for its own
// meter.
const meterPolicy = `
rules:
  - name: requests
    key: [tenant]
    rate: 60/1m
  - name: input
    key: [tenant]
    rate: 1000000/24h
    algorithm: fixed_window
    meter: input_tokens
    cost: 2000
    settle: true
  - name: output
    key: [tenant]
    rate: 200000/24h
    algorithm: fixed_window
    meter: output_tokens
    cost: 1000
    settle: true
`

// onEveryMeterStore runs test, in parallel, on a limiter of policy y over
// memstore, Redis standalone and a Redis Cluster, each on fake time, with
// the store to peek at.
func onEveryMeterStore(t *testing.T, y string, test func(t *testing.T, s quota.Store, l *tiers.Limiter)) {
	stores := map[string]func(*testing.T, *clock.Fake) (quota.Store, error){
		"memstore": func(_ *testing.T, clk *clock.Fake) (quota.Store, error) {
			return memstore.New(memstore.WithClock(clk))
		},
		"redis": func(t *testing.T, clk *clock.Fake) (quota.Store, error) {
			return redisstore.New(redistest.Start(t).Client(), redisstore.WithClock(clk))
		},
		"redis_cluster": func(t *testing.T, clk *clock.Fake) (quota.Store, error) {
			if testing.Short() {
				t.Skip("starts a Redis Cluster")
			}
			return redisstore.New(redistest.StartCluster(t).Client(), redisstore.WithClock(clk))
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, err := newStore(t, clock.New(time.Unix(1_800_000_000, 0)))
			if err != nil {
				t.Fatal(err)
			}
			test(t, st, mustLimiter(t, st, y))
		})
	}
}

// reported is the Result a transport hands the Dones of a request whose
// handler reported the given meters ("" the default one) through
// floodgate.ReportMeter: the values travel as in a real call, through the
// request's context node.
func reported(t *testing.T, meters ...any) floodgate.Result {
	t.Helper()
	ctx, _ := reqctx.New[floodgate.Request](context.Background(), nil)
	for i := 0; i+1 < len(meters); i += 2 {
		if err := floodgate.ReportMeter(ctx, meters[i].(string), int64(meters[i+1].(int))); err != nil {
			t.Fatal(err)
		}
	}
	res := floodgate.Result{}
	var m *reqctx.Meters
	res.Cost, res.HasCost, m = reqctx.Costs(ctx)
	if m != nil {
		res.Meters = m
	}
	return res
}

// meterLeft returns what is left in each of the rules' buckets for r.
func meterLeft(t *testing.T, s quota.Store, l *tiers.Limiter, r *floodgate.Request, rules ...string) []int64 {
	t.Helper()
	out := make([]int64, len(rules))
	for i, rule := range rules {
		out[i] = peek(t, s, l, r, rule)
	}
	return out
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMetersSettleEachLevel: each settling level is settled with its own
// meter's actual value, exactly, in one store call per request; a meter
// the handler did not report keeps its estimate; the default meter's cost
// (ReportCost) settles no meter rule; floodgate.Ignored refunds every
// meter. The request count is charged one per request throughout. On
// memstore, Redis and a Redis Cluster.
func TestMetersSettleEachLevel(t *testing.T) {
	t.Parallel()
	onEveryMeterStore(t, meterPolicy, func(t *testing.T, s quota.Store, l *tiers.Limiter) {
		r := tenantReq("acme")
		rules := []string{"requests", "input", "output"}
		steps := []struct {
			name     string
			res      floodgate.Result
			want     []int64 // left after settling
			settled  uint64  // store calls that settled, in all
			admitted []int64 // left after admission
		}{
			{"both meters", reported(t, "input_tokens", 1500, "output_tokens", 3000),
				[]int64{59, 1_000_000 - 1500, 200_000 - 3000}, 1,
				[]int64{59, 1_000_000 - 2000, 200_000 - 1000}},
			{"output only: input keeps its estimate", reported(t, "output_tokens", 500),
				[]int64{58, 998_500 - 2000, 197_000 - 500}, 2,
				[]int64{58, 998_500 - 2000, 197_000 - 1000}},
			{"the default meter settles no meter rule", reported(t, "", 5),
				[]int64{57, 996_500 - 2000, 196_500 - 1000}, 2,
				[]int64{57, 996_500 - 2000, 196_500 - 1000}},
			{"ignored refunds every meter", floodgate.Ignored,
				[]int64{56, 994_500, 195_500}, 3,
				[]int64{56, 994_500 - 2000, 195_500 - 1000}},
			{"estimates exact: nothing to settle", reported(t, "input_tokens", 2000, "output_tokens", 1000),
				[]int64{55, 994_500 - 2000, 195_500 - 1000}, 3,
				[]int64{55, 994_500 - 2000, 195_500 - 1000}},
			{"zero of each: refunds both", reported(t, "input_tokens", 0, "output_tokens", 0),
				[]int64{54, 992_500, 194_500}, 4,
				[]int64{54, 992_500 - 2000, 194_500 - 1000}},
		}
		for _, st := range steps {
			d, done := admitDone(t, l, r)
			if !d.Allowed || done == nil {
				t.Fatalf("%s: allowed=%v done=%v, want allowed with a Done", st.name, d.Allowed, done != nil)
			}
			if got := meterLeft(t, s, l, r, rules...); !equalInts(got, st.admitted) {
				t.Fatalf("%s: left after admission %v, want %v", st.name, got, st.admitted)
			}
			done(st.res)
			if got := meterLeft(t, s, l, r, rules...); !equalInts(got, st.want) {
				t.Fatalf("%s: left after settling %v, want %v", st.name, got, st.want)
			}
			if got := l.SettleStats(); got.Settled != st.settled || got.Failed != 0 {
				t.Fatalf("%s: SettleStats %+v, want %d settled in all, none failed", st.name, got, st.settled)
			}
		}
	})
}

// TestMetersAllOrNothing: a request denied by one level charges no meter
// anywhere: the output level, run down by a large settlement, denies the
// next request's estimate, and the request count and input tokens are
// exactly as they were. A request another tenant makes is unaffected.
func TestMetersAllOrNothing(t *testing.T) {
	t.Parallel()
	onEveryMeterStore(t, meterPolicy, func(t *testing.T, s quota.Store, l *tiers.Limiter) {
		r := tenantReq("acme")
		rules := []string{"requests", "input", "output"}
		d, done := admitDone(t, l, r)
		if !d.Allowed || done == nil {
			t.Fatal("the first request was not admitted")
		}
		done(reported(t, "input_tokens", 100, "output_tokens", 199_500)) // 500 output tokens left
		before := []int64{59, 1_000_000 - 100, 500}
		if got := meterLeft(t, s, l, r, rules...); !equalInts(got, before) {
			t.Fatalf("left %v, want %v", got, before)
		}
		d, done = admitDone(t, l, r)
		if d.Allowed || done != nil {
			t.Fatalf("a request whose output estimate (1000) exceeds what is left (500) was allowed (done %v)", done != nil)
		}
		if d.Policy != "output" {
			t.Fatalf("denied by %q, want output", d.Policy)
		}
		if got := meterLeft(t, s, l, r, rules...); !equalInts(got, before) {
			t.Fatalf("after a deny: left %v, want %v (nothing charged at any level)", got, before)
		}
		other := tenantReq("globex")
		if d, done := admitDone(t, l, other); !d.Allowed || done == nil {
			t.Fatal("another tenant's request was not admitted")
		}
	})
}

// TestMeterLoadErrors: a bad meter name, an empty one and a meter without
// settle are refused at load, naming the field and its line; a meter
// built in Go is checked the same way.
func TestMeterLoadErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ yaml, want string }{
		{`
rules:
  - {name: w, rate: 5/1m, settle: true, meter: "output tokens"}
`, `rules[0].meter: "output tokens" is not a meter name: use one or more of [A-Za-z0-9_.-], such as output_tokens, at line 3`},
		{`
rules:
  - name: w
    rate: 5/1m
    settle: true
    meter: "  "
`, `rules[0].meter: is empty: leave meter out for the default meter, at line 6`},
		{`
rules:
  - name: w
    rate: 5/1m
    meter: output_tokens
`, `rules[0].meter: "output_tokens" needs settle: true (a meter is read only when a request's charge is settled; without settle the rule charges its cost at admission and the meter would say nothing), at line 5`},
		{`
rules:
  - {name: w, rate: 5/1m, settle: true, meter: [a]}
`, `rules[0].meter: must be a string, got a list, at line 3`},
		{`
rules:
  - {name: w, rate: 5/1m, settle: true, meter: ` + strings.Repeat("m", 65) + `}
`, `rules[0].meter: "mmmmmmmmmmmmmmmmmmmm"... is longer than 64 bytes, at line 3`},
	}
	for _, c := range cases {
		_, err := tiers.Load([]byte(c.yaml))
		if err == nil || err.Error() != c.want {
			t.Errorf("Load(%s)\n got  %v\n want %s", strings.TrimSpace(c.yaml), err, c.want)
		}
	}
	p := &tiers.Policy{Rules: []tiers.Rule{{Name: "w", Rate: tiers.Rate{N: 5, Period: time.Minute}, Settle: true, Meter: "out/put"}}}
	if _, err := tiers.NewLimiter(newMemstore(t), p); err == nil || !strings.Contains(err.Error(), `rules[0].meter: "out/put" is not a meter name`) {
		t.Errorf("NewLimiter with Meter %q = %v, want a meter error", "out/put", err)
	}
	p.Rules[0].Meter = "output_tokens"
	if _, err := tiers.NewLimiter(newMemstore(t), p); err != nil {
		t.Errorf("NewLimiter with a valid meter: %v", err)
	}
}

// meterEstimatePolicy: meter rules without a cost of their own, beside a
// default-meter rule that charges the request's Cost.
const meterEstimatePolicy = `
rules:
  - {name: calls, key: [tenant], rate: 1000/1h, settle: true}
  - {name: input, key: [tenant], rate: 5000/1h, meter: input_tokens, settle: true}
  - {name: output, key: [tenant], rate: 2000/1h, meter: output_tokens, settle: true}
`

// TestMeterEstimates: a meter rule without a cost of its own charges, at
// admission, the value reported for its meter before admission (what a
// WithCost func does), else 1, and never Request.Cost, which only the
// default meter's rules charge; an estimate above the rule's capacity is
// denied without a take. The estimate stands when the handler reports
// nothing more, and a later report settles it.
func TestMeterEstimates(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, meterEstimatePolicy)
	rules := []string{"calls", "input", "output"}
	ctx, r := reqctx.New[floodgate.Request](context.Background(), nil)
	*r = *tenantReq("acme")
	r.Cost = 7
	admitCtx := func(ctx context.Context) (floodgate.Decision, floodgate.Done, error) {
		return l.Admit(ctx, r)
	}
	// No estimate reported: the meter rules charge 1, the default meter 7.
	d, done, err := admitCtx(ctx)
	if err != nil || !d.Allowed || done == nil {
		t.Fatalf("Admit = %+v, %v, %v", d, done != nil, err)
	}
	if got, want := meterLeft(t, s, l, r, rules...), []int64{993, 4999, 1999}; !equalInts(got, want) {
		t.Fatalf("no estimates: left %v, want %v", got, want)
	}
	done(floodgate.Result{}) // nothing reported: every estimate stands
	if got, want := meterLeft(t, s, l, r, rules...), []int64{993, 4999, 1999}; !equalInts(got, want) {
		t.Fatalf("nothing reported: left %v, want %v", got, want)
	}

	// Estimates reported before admission, on a new request's context.
	ctx, r2 := reqctx.New[floodgate.Request](context.Background(), nil)
	*r2 = *r
	r = r2
	if err := floodgate.ReportMeter(ctx, "input_tokens", 300); err != nil {
		t.Fatal(err)
	}
	if err := floodgate.ReportMeter(ctx, "output_tokens", 500); err != nil {
		t.Fatal(err)
	}
	d, done, err = admitCtx(ctx)
	if err != nil || !d.Allowed || done == nil {
		t.Fatalf("Admit = %+v, %v, %v", d, done != nil, err)
	}
	if got, want := meterLeft(t, s, l, r, rules...), []int64{986, 4699, 1499}; !equalInts(got, want) {
		t.Fatalf("estimates 300 and 500: left %v, want %v", got, want)
	}
	// The handler reports the output (120) and the default meter (2);
	// the input keeps its estimate, as reported.
	if err := floodgate.ReportMeter(ctx, "output_tokens", 120); err != nil {
		t.Fatal(err)
	}
	if err := floodgate.ReportCost(ctx, 2); err != nil {
		t.Fatal(err)
	}
	_, _, m := reqctx.Costs(ctx)
	done(floodgate.Result{Cost: 2, HasCost: true, Meters: m})
	if got, want := meterLeft(t, s, l, r, rules...), []int64{991, 4699, 1879}; !equalInts(got, want) {
		t.Fatalf("settled: left %v, want %v", got, want)
	}

	// An estimate above the output rule's capacity: denied, nothing taken.
	ctx, r3 := reqctx.New[floodgate.Request](context.Background(), nil)
	*r3 = *r
	r = r3
	if err := floodgate.ReportMeter(ctx, "output_tokens", 2001); err != nil {
		t.Fatal(err)
	}
	d, done, err = admitCtx(ctx)
	if d.Allowed || done != nil || !errors.Is(err, tiers.ErrCostExceedsCapacity) || d.Policy != "output" {
		t.Fatalf("an estimate above capacity: %+v, done %v, err %v; want a deny by output wrapping ErrCostExceedsCapacity", d, done != nil, err)
	}
	if got, want := meterLeft(t, s, l, r, rules...), []int64{991, 4699, 1879}; !equalInts(got, want) {
		t.Fatalf("after the deny: left %v, want %v (nothing charged)", got, want)
	}
}

// TestMethodCostSparesMeterRules: a method's cost (methods:) is the
// default meter's: it is checked against the capacity of the rules that
// charge it, and not against a meter rule's, which never charges it.
func TestMethodCostSparesMeterRules(t *testing.T) {
	t.Parallel()
	const y = `
rules:
  - {name: calls, key: [tenant], rate: 100/1m}
  - {name: output, key: [tenant], rate: 50/1m, meter: output_tokens, settle: true}
methods:
  /llm.v1.LLM/Complete: {cost: 80}
`
	if _, err := tiers.NewLimiter(newMemstore(t), mustLoad(t, y)); err != nil {
		t.Fatalf("a method cost above a meter rule's capacity: %v", err)
	}
	over := strings.Replace(y, "cost: 80", "cost: 101", 1)
	if _, err := tiers.Load([]byte(over)); err == nil || !strings.Contains(err.Error(), `methods["/llm.v1.LLM/Complete"].cost: 101 exceeds the capacity 100 of rule "calls"`) {
		t.Fatalf("a method cost above a default-meter rule's capacity: %v", err)
	}
}

// TestHitsAddendChargesTheDefaultMeter: a gateway's hits_addend (a
// descriptor's Cost, AdmitDescriptors) is the default meter's: a rule
// without a meter is charged it, a meter rule its own cost, else 1.
func TestHitsAddendChargesTheDefaultMeter(t *testing.T) {
	t.Parallel()
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clock.New(time.Time{}))), `
rules:
  - {name: requests, key: [tenant], rate: 100/1m}
  - {name: output, key: [tenant], rate: 1000/1m, meter: output_tokens, settle: true}
  - {name: input, key: [tenant], rate: 1000/1m, meter: input_tokens, cost: 7, settle: true}
rls:
  - domain: edge
    descriptors:
      - {entries: [{key: tenant, as: tenant}], rule: requests}
      - {entries: [{key: tenant, as: tenant}, {key: meter, value: output}], rule: output}
      - {entries: [{key: tenant, as: tenant}, {key: meter, value: input}], rule: input}
`)
	ds := []tiers.Descriptor{desc("tenant", "acme"), desc("tenant", "acme", "meter", "output"), desc("tenant", "acme", "meter", "input")}
	for i := range ds {
		ds[i].Cost = 40 // hits_addend
	}
	_, out := admitDescs(t, l, "edge", ds...)
	for i, want := range []struct {
		rule      string
		remaining int64
	}{{"requests", 60}, {"output", 999}, {"input", 993}} {
		if d := out[i].Decision; !d.Allowed || d.Policy != want.rule || d.Remaining != want.remaining {
			t.Errorf("descriptor %d: %+v; want %s allowed with %d remaining", i, d, want.rule, want.remaining)
		}
	}
}

// TestShadowMeterRuleSettles: a shadow rule with a meter is settled with
// its meter's value, like a real one, when its take charged.
func TestShadowMeterRuleSettles(t *testing.T) {
	t.Parallel()
	s := newMemstore(t, memstore.WithClock(clock.New(time.Time{})))
	l := mustLimiter(t, s, `
rules:
  - {name: requests, key: [tenant], rate: 100/1m}
  - {name: output, key: [tenant], rate: 1000/1h, meter: output_tokens, cost: 50, settle: true, shadow: true}
`)
	r := tenantReq("acme")
	d, done := admitDone(t, l, r)
	if !d.Allowed || done == nil {
		t.Fatalf("allowed=%v done=%v", d.Allowed, done != nil)
	}
	if got := peek(t, s, l, r, "output"); got != 950 {
		t.Fatalf("shadow bucket after admission: %d, want 950", got)
	}
	done(reported(t, "output_tokens", 300))
	if got := peek(t, s, l, r, "output"); got != 700 {
		t.Fatalf("shadow bucket after settling: %d, want 700", got)
	}
}
