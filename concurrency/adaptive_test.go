package concurrency_test

import (
	"math"
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
	clk := clock.New(time.Time{})
	a, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{
		Initial: 10, Min: 1, Max: 15, Window: 10 * time.Millisecond, MinSamples: 10, Clock: clk,
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
