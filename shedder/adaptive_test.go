package shedder_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reqctx"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// waves drives a Shedder on fake time one window at a time: each wave
// admits n critical requests (never shed), lets them take lat, and ends
// them with outcome o at exactly one Window after the previous wave's
// end, so that with MinSamples n every wave closes one window.
type waves struct {
	t      *testing.T
	s      *shedder.Shedder
	clk    *clock.Fake
	window time.Duration
}

func (w waves) wave(n int, lat time.Duration, o floodgate.Outcome) {
	w.t.Helper()
	w.clk.Advance(w.window - lat)
	dones := make([]floodgate.Done, n)
	for i := range dones {
		d, done, _ := w.s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		if !d.Allowed {
			w.t.Fatalf("critical request denied: %+v", d)
		}
		dones[i] = done
	}
	w.clk.Advance(lat)
	for _, d := range dones {
		d(floodgate.Result{Outcome: o})
	}
}

// The probe, exactly: once no window has been as fast as the least
// latency for Probe, the capacity drops to half of what was in flight for
// two windows; the first lets earlier requests drain, the second measures
// only the requests admitted after it (a slow request admitted during the
// drain does not count), and its mean becomes the least latency. Then the
// capacity is restored.
func TestAdaptiveCapacityProbe(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s := newAdaptiveShedder(t, clk, 40, shedder.AdaptiveCapacity{Min: 1, Max: 100, MinSamples: 6, Probe: time.Second})
	w := waves{t, s, clk, 100 * time.Millisecond}
	w.wave(6, 10*time.Millisecond, floodgate.OutcomeSuccess)
	if st := s.Stats(); st.MinLatency != 10*time.Millisecond || st.Windows != 1 || st.Throughput != 60 {
		t.Fatalf("after the first window: %+v; want least latency 10ms, 1 window, 60/s", st)
	}
	for i := 2; i <= 10; i++ {
		w.wave(6, 12*time.Millisecond, floodgate.OutcomeSuccess)
		if st := s.Stats(); st.Probing || st.Capacity != 40 || st.Latency != 12*time.Millisecond {
			t.Fatalf("window %d: %+v; want capacity 40, no probe yet", i, st)
		}
	}
	w.wave(6, 12*time.Millisecond, floodgate.OutcomeSuccess) // 1s since the least latency was seen
	if st := s.Stats(); !st.Probing || st.Capacity != 3 {
		t.Fatalf("window 11: %+v; want a probe at half the 6 in flight", st)
	}
	// The drain window; a slow request admitted during it ends later.
	_, slow, _ := s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
	w.wave(6, 11*time.Millisecond, floodgate.OutcomeSuccess)
	if st := s.Stats(); !st.Probing || st.Capacity != 3 {
		t.Fatalf("after the drain window: %+v; want the probe still on", st)
	}
	clk.Advance(50 * time.Millisecond)
	slow(floodgate.Result{})
	w.wave(6, 11*time.Millisecond, floodgate.OutcomeSuccess)
	if st := s.Stats(); st.Probing || st.Capacity != 40 || st.MinLatency != 11*time.Millisecond {
		t.Fatalf("after the measuring window: %+v; want least latency 11ms and capacity 40 restored", st)
	}
}

// What each outcome is to the estimate: a failure is served work (a
// latency sample and throughput), a drop is a latency sample only, an
// ignored request nothing. A window whose drops push its mean latency past
// Tolerance x the least is an overload.
func TestAdaptiveCapacityOutcomes(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s := newAdaptiveShedder(t, clk, 40, shedder.AdaptiveCapacity{Min: 1, Max: 100, MinSamples: 5})
	w := waves{t, s, clk, 100 * time.Millisecond}
	w.wave(5, 10*time.Millisecond, floodgate.OutcomeFailed)
	if st := s.Stats(); st.Windows != 1 || st.Throughput != 50 || st.Latency != 10*time.Millisecond {
		t.Fatalf("a window of failures: %+v; want 1 window, 50/s, 10ms", st)
	}
	for range 3 {
		w.wave(5, time.Millisecond, floodgate.OutcomeIgnored)
	}
	if st := s.Stats(); st.Windows != 1 {
		t.Fatalf("ignored requests closed a window: %+v", st)
	}
	w.wave(5, 40*time.Millisecond, floodgate.OutcomeDropped)
	st := s.Stats()
	if st.Windows != 2 || st.Latency != 40*time.Millisecond || !st.Overloaded || st.Throughput != 50 {
		t.Fatalf("a window of slow drops: %+v; want an overload at 40ms, throughput still the first window's 50/s", st)
	}
	// Overloaded: min(40 x Backoff, 50/s x 10ms x Headroom) = min(36, 0.625) -> Min 1.
	if st.Capacity != 1 {
		t.Fatalf("capacity %d after the overload, want 1", st.Capacity)
	}
}

// In a Chain, a later stage's deny releases the shedder's slot with
// floodgate.Ignored: no latency sample, however many and however fast
// (the control, the same requests reported as successes, closes windows).
func TestAdaptiveCapacityChainDenialIsNoSample(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		windows int64
	}{{"chain denial", 0}, {"control", 1}} {
		clk := clock.New(time.Time{})
		s := newAdaptiveShedder(t, clk, 40, shedder.AdaptiveCapacity{Min: 1, Max: 100, MinSamples: 1, Window: time.Millisecond})
		chain := floodgate.Chain{s, floodgate.AdmitFunc(func(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
			if tc.windows == 0 {
				return floodgate.Decision{Stage: floodgate.StageTiers, Policy: "quota"}, nil, nil
			}
			return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}, nil, nil
		})}
		for range 1000 {
			d, done, _ := chain.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityRead})
			clk.Advance(100 * time.Microsecond)
			if done != nil {
				done(floodgate.Result{})
			}
			if d.Allowed == (tc.windows == 0) {
				t.Fatalf("%s: %+v", tc.name, d)
			}
		}
		st := s.Stats()
		if (st.Windows > 0) != (tc.windows > 0) || s.InFlight() != 0 || st.Capacity != 40 && tc.windows == 0 {
			t.Errorf("%s: %+v, in flight %d", tc.name, st, s.InFlight())
		}
	}
}

// A request's wait on a degraded store (a later stage waiting for a
// stalled Redis, reqctx.Wait) is not the service's latency: what was added
// after the shedder admitted the request is taken out of its sample, what
// was added before is not the shedder's to take. Without it, the 40ms a
// stalled store added would read as an overload (50ms against 10ms).
func TestAdaptiveCapacityStoreWaitIsNoLatency(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s := newAdaptiveShedder(t, clk, 40, shedder.AdaptiveCapacity{Min: 1, Max: 100, MinSamples: 5})
	w := waves{t, s, clk, 100 * time.Millisecond}
	w.wave(5, 10*time.Millisecond, floodgate.OutcomeSuccess)
	clk.Advance(50 * time.Millisecond)
	dones := make([]floodgate.Done, 5)
	for i := range dones {
		rctx, _ := reqctx.New[floodgate.Request](ctx, nil)
		reqctx.AddWait(rctx, time.Second) // before the shedder: not its to take
		_, dones[i], _ = s.Admit(rctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		reqctx.AddWait(rctx, 40*time.Millisecond)
	}
	clk.Advance(50 * time.Millisecond)
	for _, d := range dones {
		d(floodgate.Result{})
	}
	if st := s.Stats(); st.Windows != 2 || st.Latency != 10*time.Millisecond || st.Overloaded || st.Capacity != 40 {
		t.Fatalf("a window whose requests waited 40ms of their 50ms on a store: %+v; want 10ms, no overload, capacity 40", st)
	}
}

// An adaptive Shedder refuses at once a request whose deadline is nearer
// than the least latency it has seen (10ms here): it cannot finish in
// time. Its Decision's policy is "shedder.deadline" with no retry delay;
// a request with room, one without a deadline and a critical one pass;
// before a window has closed nothing is known and nothing is refused.
// The fake clock starts at the real time, so the contexts' (real)
// deadlines are ahead of it by what each case says.
func TestAdaptiveShedsWhatCannotFinish(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Now())
	s := newAdaptiveShedder(t, clk, 40, shedder.AdaptiveCapacity{Min: 1, Max: 100, MinSamples: 5})
	within := func(d time.Duration) context.Context {
		c, cancel := context.WithDeadline(ctx, clk.Now().Add(d))
		t.Cleanup(cancel)
		return c
	}
	admit := func(c context.Context, p floodgate.Priority) floodgate.Decision {
		d, done, _ := s.Admit(c, &floodgate.Request{Priority: p})
		if done != nil {
			done(floodgate.Result{Outcome: floodgate.OutcomeIgnored})
		}
		return d
	}
	if d := admit(within(time.Millisecond), floodgate.PriorityRead); !d.Allowed {
		t.Fatalf("before any window, a near deadline: %+v; want admitted (nothing known)", d)
	}
	w := waves{t, s, clk, 100 * time.Millisecond}
	w.wave(5, 10*time.Millisecond, floodgate.OutcomeSuccess)
	if d := admit(within(9*time.Millisecond), floodgate.PriorityRead); d.Allowed || d.Policy != "shedder.deadline" || d.RetryAfter != 0 {
		t.Fatalf("9ms to its deadline, least latency 10ms: %+v; want refused, policy shedder.deadline, no retry delay", d)
	}
	for _, c := range []struct {
		ctx context.Context
		p   floodgate.Priority
	}{{within(10 * time.Millisecond), floodgate.PriorityRead}, {ctx, floodgate.PriorityTest}, {within(time.Millisecond), floodgate.PriorityCritical}} {
		if d := admit(c.ctx, c.p); !d.Allowed {
			t.Errorf("%v: %+v; want admitted", c.p, d)
		}
	}
}

// Reconfigure switches between fixed and adaptive capacity and changes the
// thresholds at run time; a configuration Check rejects changes nothing.
func TestShedderReconfigure(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s, err := shedder.New(100, shedder.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reconfigure(shedder.Config{Capacity: 50, Thresholds: shedder.Thresholds{Test: 0.5, Read: 0.6, Write: 0.7}}); err != nil {
		t.Fatal(err)
	}
	if start, _ := s.Threshold(floodgate.PriorityRead); s.Capacity() != 50 || start != 30 {
		t.Fatalf("capacity %d, read threshold %d; want 50 and 30", s.Capacity(), start)
	}
	bad := shedder.Config{Capacity: 0, Thresholds: shedder.Thresholds{Test: 0.9, Read: 0.5, Write: 0.7}, Adaptive: &shedder.AdaptiveCapacity{Min: 10, Max: 5, CPUTarget: 2}}
	err = s.Reconfigure(bad)
	for _, want := range []string{
		"shedder: Config: capacity: 0 must be >= 1",
		"shedder: Config: thresholds: thresholds test 0.9, read 0.5, write 0.7 must satisfy test <= read <= write",
		"shedder: Config: adaptive.max: 5 must be >= min 10",
		"shedder: Config: adaptive.cpu_target: 2 is out of range [0, 1]",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad Reconfigure: %v; want it to mention %q", err, want)
		}
	}
	if c := s.Config(); c.Capacity != 50 || c.Adaptive != nil || c.Thresholds.Read != 0.6 {
		t.Fatalf("after a bad Reconfigure: %+v, want the previous settings", c)
	}
	if err := s.Check(shedder.Config{Capacity: 10, Adaptive: &shedder.AdaptiveCapacity{CPUTarget: 0.8}}); err == nil ||
		!strings.Contains(err.Error(), "shedder: Config: adaptive.cpu_target: 0.8 needs a CPU meter, and the Shedder has none (build it WithCPU)") {
		t.Fatalf("Check of a CPU target without a meter: %v", err)
	}
	// Fixed to adaptive: the capacity starts from Capacity, clamped.
	if err := s.Reconfigure(shedder.Config{Capacity: 10, Adaptive: &shedder.AdaptiveCapacity{Min: 20, Max: 60}}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); !st.Adaptive || st.Capacity != 20 {
		t.Fatalf("after switching to adaptive: %+v; want capacity Min 20", st)
	}
	held := make([]floodgate.Done, 5)
	for i := range held {
		_, held[i], _ = s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
	}
	// Adaptive to adaptive: the learnt capacity is kept, clamped.
	if err := s.Reconfigure(shedder.Config{Capacity: 10, Adaptive: &shedder.AdaptiveCapacity{Min: 30, Max: 60}}); err != nil {
		t.Fatal(err)
	}
	if c := s.Capacity(); c != 30 {
		t.Fatalf("after raising Min to 30: capacity %d", c)
	}
	// Adaptive to fixed, with requests in flight: they are released as usual.
	if err := s.Reconfigure(shedder.Config{Capacity: 8}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Adaptive || st.Capacity != 8 || s.InFlight() != 5 {
		t.Fatalf("after switching to fixed: %+v, in flight %d", st, s.InFlight())
	}
	for _, d := range held {
		d(floodgate.Result{})
	}
	if s.InFlight() != 0 {
		t.Fatalf("in flight %d after releasing everything", s.InFlight())
	}
}

func TestAdaptiveCapacityOptionErrors(t *testing.T) {
	t.Parallel()
	_, err := shedder.New(10, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{
		Min: -1, Window: -1, MinSamples: -1, History: -1, Probe: -1, Tolerance: 1, Headroom: 0.5, Growth: 2, Backoff: 0.3, CPUTarget: 0.5,
	}), shedder.WithCPU(nil))
	for _, want := range []string{
		"shedder: WithAdaptiveCapacity: min: -1 must be >= 1",
		"window: -1ns is negative",
		"min_samples: -1 is negative",
		"history: -1 is negative",
		"probe: -1ns is negative",
		"tolerance: 1 must be a finite number > 1",
		"headroom: 0.5 must be a finite number >= 1",
		"growth: 2 is out of range (0, 1]",
		"backoff: 0.3 is out of range [0.5, 1)",
		"shedder: WithCPU: meter is nil",
		"shedder: WithAdaptiveCapacity: AdaptiveCapacity.CPUTarget 0.5 needs a CPU meter (AdaptiveCapacity.CPU or WithCPU)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want it to mention %q", err, want)
		}
	}
}

// The adaptive path allocates nothing per request either: its Done is a
// pooled ticket.
func TestAdaptiveAdmitAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	s := newAdaptiveShedder(t, clock.New(time.Time{}), 100, shedder.AdaptiveCapacity{})
	req := &floodgate.Request{Priority: floodgate.PriorityRead}
	for name, a := range map[string]floodgate.Admitter{"Shedder": s} {
		allocs := testing.AllocsPerRun(1000, func() {
			_, done, _ := a.Admit(ctx, req)
			done(floodgate.Result{})
		})
		if allocs != 0 {
			t.Errorf("adaptive %s Admit+Done allocates %v times per request, want 0", name, allocs)
		}
	}
}
