package concurrency_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// model is the documented update rule, written out independently.
type model struct{ est, long float64 }

func (m *model) update(short float64, inflight int64) {
	if m.long == 0 || short < m.long/2 {
		m.long = short
	} else {
		m.long += (short - m.long) / 60
	}
	if float64(inflight) < m.est/2 {
		return
	}
	g := math.Max(0.5, math.Min(1, 1.5*m.long/short))
	target := m.est*g + math.Sqrt(m.est)
	m.est = math.Min(15, math.Max(1, m.est*0.8+target*0.2))
}

// round admits n requests at once, lets each take rtt on the fake clock,
// ends them all, then idles one window: exactly one limit update per round.
func round(t *testing.T, a *concurrency.Adaptive, clk *clock.Fake, n int, rtt time.Duration) {
	t.Helper()
	var dones []floodgate.Done
	for i := range n {
		d, done, _ := a.Admit(ctx, &floodgate.Request{})
		if !d.Allowed {
			t.Fatalf("request %d of %d denied at limit %d", i+1, n, a.Limit())
		}
		dones = append(dones, done)
	}
	clk.Advance(rtt)
	for _, d := range dones {
		d(floodgate.Result{})
	}
	clk.Advance(10 * time.Millisecond)
}

func TestAdaptiveFollowsLatency(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	a, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{
		Initial: 10, Min: 1, Max: 15, Window: 10 * time.Millisecond, MinSamples: 10, LongWindow: 60, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &model{est: 10}
	check := func(step string) {
		t.Helper()
		if got := a.Estimate(); math.Abs(got-m.est) > 1e-9 {
			t.Fatalf("%s: estimate %.12f, want %.12f", step, got, m.est)
		}
		if a.Limit() != int64(m.est) {
			t.Fatalf("%s: limit %d, want %d", step, a.Limit(), int64(m.est))
		}
	}

	// Steady latency: the limit climbs to Max and stays there.
	prev := a.Estimate()
	for i := range 12 {
		round(t, a, clk, 10, 10*time.Millisecond)
		m.update(0.010, 10)
		check("steady")
		if a.Estimate() < prev || (a.Estimate() == prev && a.Estimate() < 15) {
			t.Fatalf("steady round %d: estimate %v did not grow from %v", i, a.Estimate(), prev)
		}
		prev = a.Estimate()
	}
	if a.Limit() != 15 {
		t.Fatalf("after 12 steady rounds limit %d, want Max 15", a.Limit())
	}

	// Latency quadruples: the limit shrinks every round.
	for range 3 {
		before := a.Limit()
		round(t, a, clk, 10, 40*time.Millisecond)
		m.update(0.040, 10)
		check("spike")
		if a.Limit() >= before {
			t.Fatalf("spike: limit %d did not shrink from %d", a.Limit(), before)
		}
	}

	// App-limited: only 2 in flight, the limit holds.
	before := a.Estimate()
	for range 5 {
		round(t, a, clk, 2, 10*time.Millisecond)
	}
	m.update(0.010, 2)
	check("app-limited")
	if a.Estimate() != before {
		t.Fatalf("app-limited: estimate moved from %v to %v", before, a.Estimate())
	}

	// Latency back to normal: the limit grows again.
	round(t, a, clk, 10, 10*time.Millisecond)
	m.update(0.010, 10)
	check("recovered")
	if a.Estimate() <= before {
		t.Fatalf("recovery: estimate %v did not grow from %v", a.Estimate(), before)
	}
	if a.InFlight() != 0 {
		t.Fatalf("in flight %d, want 0", a.InFlight())
	}
}

func TestAdaptiveCapsAndDoneOnce(t *testing.T) {
	t.Parallel()
	a, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{Initial: 2, Max: 10, Clock: clock.New(time.Time{})})
	if err != nil {
		t.Fatal(err)
	}
	_, d1, _ := a.Admit(ctx, &floodgate.Request{})
	_, d2, _ := a.Admit(ctx, &floodgate.Request{})
	d, done, _ := a.Admit(ctx, &floodgate.Request{})
	if d.Allowed || done != nil || d.Policy != "adaptive-concurrency" || d.Limit != 2 || d.RetryAfter != concurrency.DefaultRetryAfter {
		t.Fatalf("third request: %+v, want a deny at limit 2", d)
	}
	d1(floodgate.Result{})
	d1(floodgate.Result{})
	if a.InFlight() != 1 {
		t.Fatalf("in flight %d after a double Done, want 1", a.InFlight())
	}
	d2(floodgate.Result{})
}

// roundOutcome is round with every request ending in outcome o.
func roundOutcome(t *testing.T, a *concurrency.Adaptive, clk *clock.Fake, n int, rtt time.Duration, o floodgate.Outcome) {
	t.Helper()
	var dones []floodgate.Done
	for i := range n {
		d, done, _ := a.Admit(ctx, &floodgate.Request{})
		if !d.Allowed {
			t.Fatalf("request %d of %d denied at limit %d", i+1, n, a.Limit())
		}
		dones = append(dones, done)
	}
	clk.Advance(rtt)
	for _, d := range dones {
		d(floodgate.Result{Outcome: o})
	}
	clk.Advance(10 * time.Millisecond)
}

func newAdaptive(t *testing.T, cfg concurrency.AdaptiveConfig) (*concurrency.Adaptive, *clock.Fake) {
	t.Helper()
	clk := clock.New(time.Time{})
	cfg.Clock = clk
	if cfg.Window == 0 {
		cfg.Window = 10 * time.Millisecond
	}
	a, err := concurrency.NewAdaptive(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, clk
}

// vegasModel is Vegas's documented rule, written out independently.
type vegasModel struct{ est, noload float64 }

func (m *vegasModel) update(rtt float64, inflight int64, maxLimit float64) {
	if m.noload == 0 || rtt < m.noload {
		m.noload = rtt
		return
	}
	if float64(inflight) < m.est/2 {
		return
	}
	q := math.Ceil(m.est * (1 - m.noload/rtt))
	lg := math.Max(1, math.Log10(m.est))
	switch {
	case q <= lg:
		m.est += 6 * lg
	case q < 3*lg:
		m.est += lg
	case q > 6*lg:
		m.est -= lg
	}
	m.est = math.Max(1, math.Min(maxLimit, m.est))
}

// Vegas grows fast while there is no queue, stops at Max, and after a
// latency step shrinks until its queue estimate is between Alpha and Beta
// times log10(limit): exactly the documented rule.
func TestVegasFollowsLatency(t *testing.T) {
	t.Parallel()
	a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Algorithm: concurrency.Vegas, Initial: 10, Max: 20})
	m := &vegasModel{est: 10}
	check := func(step string) {
		t.Helper()
		if got := a.Estimate(); math.Abs(got-m.est) > 1e-9 {
			t.Fatalf("%s: estimate %.12f, want %.12f", step, got, m.est)
		}
	}
	for range 4 {
		roundOutcome(t, a, clk, 10, 10*time.Millisecond, floodgate.OutcomeSuccess)
		m.update(0.010, 10, 20)
		check("steady")
	}
	if a.Limit() != 20 || a.NoLoad() != 0.010 {
		t.Fatalf("after 4 steady rounds: limit %d, no-load %v; want Max 20 and 10ms", a.Limit(), a.NoLoad())
	}
	var seen []int64
	for range 8 {
		roundOutcome(t, a, clk, 10, 20*time.Millisecond, floodgate.OutcomeSuccess)
		m.update(0.020, 10, 20)
		check("step")
		seen = append(seen, a.Limit())
	}
	if seen[0] >= 20 || seen[len(seen)-1] != seen[len(seen)-2] || seen[len(seen)-1] < 10 {
		t.Fatalf("limits after the latency step %v: want a fall from 20 that settles at 10 or more", seen)
	}
}

// aimdModel is AIMD's documented rule.
func aimdModel(est float64, rtt float64, inflight int64, drop bool, timeout, maxLimit float64) float64 {
	switch {
	case drop || (timeout > 0 && rtt > timeout):
		est *= 0.9
	case float64(inflight)*2 >= est:
		est++
	}
	return math.Max(1, math.Min(maxLimit, est))
}

// AIMD adds one per window that used half its limit, stops at Max, and
// multiplies by 0.9 on a window slower than Timeout and on a drop.
func TestAIMDFollowsLatencyAndDrops(t *testing.T) {
	t.Parallel()
	a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Algorithm: concurrency.AIMD, Initial: 10, Max: 14, Timeout: 30 * time.Millisecond})
	est := 10.0
	for i := range 6 {
		roundOutcome(t, a, clk, 10, 10*time.Millisecond, floodgate.OutcomeSuccess)
		est = aimdModel(est, 0.010, 10, false, 0.030, 14)
		if a.Estimate() != est {
			t.Fatalf("steady round %d: estimate %v, want %v", i, a.Estimate(), est)
		}
	}
	if a.Limit() != 14 {
		t.Fatalf("limit %d after 6 steady rounds, want Max 14", a.Limit())
	}
	roundOutcome(t, a, clk, 10, 40*time.Millisecond, floodgate.OutcomeSuccess)
	est = aimdModel(est, 0.040, 10, false, 0.030, 14)
	if math.Abs(a.Estimate()-est) > 1e-9 || a.Limit() != 12 {
		t.Fatalf("after a window slower than Timeout: estimate %v limit %d, want %v and 12", a.Estimate(), a.Limit(), est)
	}
	// One drop is enough to close a window, and backs off.
	_, done, _ := a.Admit(ctx, &floodgate.Request{})
	clk.Advance(time.Millisecond)
	done(floodgate.Result{Outcome: floodgate.OutcomeDropped})
	est = aimdModel(est, 0, 1, true, 0.030, 14)
	if math.Abs(a.Estimate()-est) > 1e-9 {
		t.Fatalf("after a drop: estimate %v, want %v", a.Estimate(), est)
	}
}

// Floors and ceilings: every algorithm stops at Max under steady fast
// latency with demand to use it, and at Min under repeated drops, never
// past either.
func TestAdaptiveFloorAndCeiling(t *testing.T) {
	t.Parallel()
	for _, alg := range []concurrency.AdaptiveAlgorithm{concurrency.Gradient2, concurrency.Vegas, concurrency.AIMD} {
		t.Run(alg.String(), func(t *testing.T) {
			a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Algorithm: alg, Initial: 8, Min: 3, Max: 12})
			for i := range 40 {
				roundOutcome(t, a, clk, 8, 10*time.Millisecond, floodgate.OutcomeSuccess)
				if l := a.Limit(); l > 12 {
					t.Fatalf("round %d: limit %d above Max 12", i, l)
				}
			}
			if a.Limit() != 12 {
				t.Fatalf("limit %d after 40 steady rounds, want Max 12", a.Limit())
			}
			for i := range 40 {
				roundOutcome(t, a, clk, 3, 10*time.Millisecond, floodgate.OutcomeDropped)
				if l := a.Limit(); l < 3 {
					t.Fatalf("drop round %d: limit %d below Min 3", i, l)
				}
			}
			if a.Limit() != 3 || a.Estimate() != 3 {
				t.Fatalf("limit %d (estimate %v) after 40 rounds of drops, want Min 3", a.Limit(), a.Estimate())
			}
		})
	}
}

// A window's latency is its percentile, not its mean: one request of a
// second among nine of 10ms leaves the median at 10ms (the limit grows as
// on a steady window) while the 95th percentile sees it (the limit
// shrinks). A mean of 109ms would have shrunk both.
func TestAdaptivePercentileNotMean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		percentile float64
		grows      bool
	}{{0.5, true}, {0.95, false}} {
		a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Initial: 10, Max: 100, Percentile: tc.percentile})
		for range 3 {
			roundOutcome(t, a, clk, 10, 10*time.Millisecond, floodgate.OutcomeSuccess)
		}
		before := a.Estimate()
		var dones []floodgate.Done
		for range 10 {
			_, done, _ := a.Admit(ctx, &floodgate.Request{})
			dones = append(dones, done)
		}
		clk.Advance(10 * time.Millisecond)
		for _, d := range dones[:9] {
			d(floodgate.Result{})
		}
		clk.Advance(990 * time.Millisecond)
		windows := a.Windows()
		dones[9](floodgate.Result{})
		if a.Windows() != windows+1 {
			t.Fatalf("p%v: the slow request did not close the window", tc.percentile)
		}
		if grew := a.Estimate() > before; grew != tc.grows {
			t.Errorf("p%v: estimate %v -> %v, want growth %v", tc.percentile, before, a.Estimate(), tc.grows)
		}
	}
}

// Failed and ignored requests are no samples: no window ever closes on
// them and the limit does not move, though each releases its slot.
func TestAdaptiveFailedAndIgnoredAreNoSamples(t *testing.T) {
	t.Parallel()
	for _, o := range []floodgate.Outcome{floodgate.OutcomeFailed, floodgate.OutcomeIgnored} {
		a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Initial: 10, Max: 100})
		for range 50 {
			roundOutcome(t, a, clk, 10, time.Microsecond, o)
		}
		if a.Windows() != 0 || a.Estimate() != 10 || a.InFlight() != 0 {
			t.Errorf("%s: %d windows, estimate %v, in flight %d; want 0, 10, 0", o, a.Windows(), a.Estimate(), a.InFlight())
		}
	}
}

// A request dropped fast (a deadline error answered at once) is never a
// fast sample: its window backs off by exactly Backoff.
func TestAdaptiveFastDropBacksOff(t *testing.T) {
	t.Parallel()
	for _, alg := range []concurrency.AdaptiveAlgorithm{concurrency.Gradient2, concurrency.Vegas, concurrency.AIMD} {
		a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Algorithm: alg, Initial: 20, Max: 100, Backoff: 0.75})
		clk.Advance(10 * time.Millisecond) // the window is due: the first drop closes it
		roundOutcome(t, a, clk, 10, 0, floodgate.OutcomeDropped)
		if a.Estimate() != 15 {
			t.Errorf("%s: estimate %v after a window of fast drops, want 20 * 0.75 = 15", alg, a.Estimate())
		}
	}
}

// denyAll is a chain stage that denies everything.
var denyAll = floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return floodgate.Decision{Stage: floodgate.StageTiers, Policy: "quota"}, nil, nil
})

// In a Chain, a request a later stage denies is released at once with
// floodgate.Ignored: no sample. A thousand such denials between windows of
// normal traffic leave the limiter exactly where the normal traffic alone
// would; had they been reported as fast successes (the control), the
// long-run latency would have collapsed to theirs and the next normal
// window would have shrunk the limit.
func TestAdaptiveChainDenialIsNoFastSample(t *testing.T) {
	t.Parallel()
	run := func(fast func(a *concurrency.Adaptive, clk *clock.Fake)) (*concurrency.Adaptive, float64) {
		a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Initial: 10, Max: 100, LongWindow: 60})
		for range 3 {
			roundOutcome(t, a, clk, 10, 10*time.Millisecond, floodgate.OutcomeSuccess)
		}
		before := a.Estimate()
		fast(a, clk)
		roundOutcome(t, a, clk, 10, 10*time.Millisecond, floodgate.OutcomeSuccess)
		return a, before
	}
	chained, before := run(func(a *concurrency.Adaptive, clk *clock.Fake) {
		chain := floodgate.Chain{a, denyAll}
		at := a.Estimate()
		for range 1000 {
			d, done, _ := chain.Admit(ctx, &floodgate.Request{})
			if d.Allowed || done != nil || d.Policy != "quota" {
				t.Fatalf("chain: %+v, want the later stage's deny", d)
			}
			clk.Advance(100 * time.Microsecond)
		}
		if a.InFlight() != 0 || a.Estimate() != at {
			t.Fatalf("after 1000 chain denials: in flight %d, estimate %v; want 0 and %v", a.InFlight(), a.Estimate(), at)
		}
	})
	reference, _ := run(func(*concurrency.Adaptive, *clock.Fake) {})
	if chained.Estimate() != reference.Estimate() || chained.LongRTT() != reference.LongRTT() || chained.Estimate() <= before {
		t.Errorf("with chain denials: estimate %v long %v; without: %v, %v; want equal, and grown from %v",
			chained.Estimate(), chained.LongRTT(), reference.Estimate(), reference.LongRTT(), before)
	}
	control, _ := run(func(a *concurrency.Adaptive, clk *clock.Fake) {
		for range 100 {
			roundOutcome(t, a, clk, 10, 100*time.Microsecond, floodgate.OutcomeSuccess)
		}
	})
	if control.LongRTT() > chained.LongRTT()/10 || control.Estimate() == chained.Estimate() {
		t.Errorf("control (fast successes): estimate %v long %v, want the long-run latency collapsed below %v and the estimate moved from %v: the check above would not catch fast samples",
			control.Estimate(), control.LongRTT(), chained.LongRTT()/10, chained.Estimate())
	}
}

// Reconfigure changes settings at run time: the limit is clamped to the
// new bounds at once, the policy name follows, a bad configuration changes
// nothing, and a new algorithm starts from a clean state.
func TestAdaptiveReconfigure(t *testing.T) {
	t.Parallel()
	a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Initial: 40, Max: 100})
	roundOutcome(t, a, clk, 30, 10*time.Millisecond, floodgate.OutcomeSuccess)
	if a.LongRTT() == 0 {
		t.Fatal("no window closed")
	}
	err := a.Reconfigure(concurrency.AdaptiveConfig{Min: 50, Max: 10, Smoothing: 3})
	if err == nil || !strings.Contains(err.Error(), "concurrency: Reconfigure: max: 10 must be >= min 50") ||
		!strings.Contains(err.Error(), "concurrency: Reconfigure: smoothing: 3 is out of range") {
		t.Fatalf("bad Reconfigure: %v", err)
	}
	if c := a.Config(); c.Max != 100 || c.Min != 1 {
		t.Fatalf("after a bad Reconfigure: Min %d Max %d, want the old 1 and 100", c.Min, c.Max)
	}
	if err := a.Reconfigure(concurrency.AdaptiveConfig{Name: "adaptive-v2", Max: 25, LongWindow: 60}); err != nil {
		t.Fatal(err)
	}
	if a.Limit() != 25 || a.LongRTT() == 0 {
		t.Fatalf("after lowering Max: limit %d, long %v; want 25 and the learnt latency kept", a.Limit(), a.LongRTT())
	}
	var dones []floodgate.Done
	for range 25 {
		_, done, _ := a.Admit(ctx, &floodgate.Request{})
		dones = append(dones, done)
	}
	d, _, _ := a.Admit(ctx, &floodgate.Request{})
	if d.Allowed || d.Policy != "adaptive-v2" || d.Limit != 25 {
		t.Fatalf("26th request: %+v, want a deny by adaptive-v2 at 25", d)
	}
	for _, done := range dones {
		done(floodgate.Ignored)
	}
	if err := a.Reconfigure(concurrency.AdaptiveConfig{Algorithm: concurrency.Vegas, Min: 30, Max: 60}); err != nil {
		t.Fatal(err)
	}
	if a.Limit() != 30 || a.LongRTT() != 0 || a.Config().Algorithm != concurrency.Vegas {
		t.Fatalf("after switching to Vegas with Min 30: limit %d, long %v, algorithm %s", a.Limit(), a.LongRTT(), a.Config().Algorithm)
	}
}

// Vegas forgets its no-load latency every ProbeEvery windows, so a service
// that became slower for good is measured again.
func TestVegasProbe(t *testing.T) {
	t.Parallel()
	a, clk := newAdaptive(t, concurrency.AdaptiveConfig{Algorithm: concurrency.Vegas, Initial: 20, Max: 20, ProbeEvery: 5})
	roundOutcome(t, a, clk, 10, 10*time.Millisecond, floodgate.OutcomeSuccess)
	for i := 1; i <= 5; i++ {
		roundOutcome(t, a, clk, 10, 30*time.Millisecond, floodgate.OutcomeSuccess)
		want := 0.010
		if i == 5 {
			want = 0.030
		}
		if a.NoLoad() != want {
			t.Fatalf("window %d after the first: no-load %v, want %v", i, a.NoLoad(), want)
		}
	}
}

func TestAlgorithmUnmarshalText(t *testing.T) {
	t.Parallel()
	for _, alg := range []concurrency.AdaptiveAlgorithm{concurrency.Gradient2, concurrency.Vegas, concurrency.AIMD} {
		var got concurrency.AdaptiveAlgorithm
		err := got.UnmarshalText([]byte(" " + strings.ToUpper(alg.String()) + " "))
		if err != nil || got != alg {
			t.Errorf("UnmarshalText(%q) = %v, %v", alg.String(), got, err)
		}
	}
	if err := new(concurrency.AdaptiveAlgorithm).UnmarshalText([]byte("bbr")); err == nil || !strings.Contains(err.Error(), `unknown adaptive algorithm "bbr" (want gradient2, vegas or aimd)`) {
		t.Errorf("UnmarshalText(bbr) = %v", err)
	}
}

// Bypass admits requests of its priority and above whatever the limit; they
// count in flight, so the others wait for them.
func TestAdaptiveBypass(t *testing.T) {
	t.Parallel()
	a, _ := newAdaptive(t, concurrency.AdaptiveConfig{Initial: 2, Max: 10, Bypass: floodgate.PriorityCritical})
	var dones []floodgate.Done
	for range 2 {
		_, done, _ := a.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityRead})
		dones = append(dones, done)
	}
	if d, _, _ := a.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityWrite}); d.Allowed {
		t.Fatalf("a write at the limit: %+v", d)
	}
	for range 3 {
		d, done, _ := a.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		if !d.Allowed || d.Remaining != 0 {
			t.Fatalf("a critical request at the limit: %+v", d)
		}
		dones = append(dones, done)
	}
	if a.InFlight() != 5 {
		t.Fatalf("in flight %d, want 5 (bypassed requests count)", a.InFlight())
	}
	for _, d := range dones {
		d(floodgate.Ignored)
	}
	if err := a.Reconfigure(concurrency.AdaptiveConfig{Bypass: 9}); err == nil || !strings.Contains(err.Error(), "concurrency: Reconfigure: bypass: 9 is not a known priority") {
		t.Fatalf("Reconfigure with a bad Bypass: %v", err)
	}
}
