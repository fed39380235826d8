//go:build system

package fallback_test

import (
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestLiveProbeWaitsAHealthyBudget: a half-open breaker's probe costs the
// request that carries it no more than a healthy call's budget. Redis is
// paused (SIGSTOP) until the breaker has opened and gone half-open; the
// next take is the probe: it is decided locally after the 50ms budget, not
// after the 3s closed budget it used to wait (the bound, 1.5s, is 30
// budgets: what a loaded machine adds to a 50ms wait is far less). When
// Redis resumes, the probe's late answer closes the breaker, and the next
// take is the store's.
func TestLiveProbeWaitsAHealthyBudget(t *testing.T) {
	const budget, closedTO, open = 50 * time.Millisecond, 3 * time.Second, 300 * time.Millisecond
	srv := redistest.Start(t)
	s, _ := liveStore(t, srv, fallback.WithTimeout(budget), fallback.WithClosedTimeout(closedTO),
		fallback.WithFailures(1), fallback.WithOpenInterval(open), fallback.WithSlowGrace(time.Nanosecond))
	b := liveBuckets[kindLocal]
	if ok, res := take(t, s, b); !ok || res[0].Source != floodgate.SourceStore {
		t.Fatalf("healthy take: %v %+v", ok, res[0])
	}
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	if _, res := take(t, s, b); res[0].Source != floodgate.SourceLocalFallback {
		t.Fatalf("take on the paused Redis: %+v, want decided locally", res[0])
	}
	if st := s.Stats().State; st != gobreaker.StateOpen {
		t.Fatalf("state %s after the failed take, want open", st)
	}
	time.Sleep(open + open/2) // half-open from here on
	start := time.Now()
	_, res := take(t, s, b)
	waited := time.Since(start)
	if res[0].Source != floodgate.SourceLocalFallback || waited > closedTO/2 {
		t.Fatalf("the probe: %+v after %s, want decided locally within a healthy call's budget (%s), not the closed budget (%s)",
			res[0], waited, budget, closedTO)
	}
	// Meanwhile, takes are decided locally at once: one probe at a time.
	start = time.Now()
	if _, res := take(t, s, b); res[0].Source != floodgate.SourceLocalFallback || time.Since(start) > closedTO/2 {
		t.Fatalf("a take while the probe's answer is on its way: %+v after %s, want local at once", res[0], time.Since(start))
	}
	srv.Resume()
	resumed = true
	if !waitFor(10*time.Second, func() bool { return s.Stats().State == gobreaker.StateClosed }) {
		t.Fatalf("state %s 10s after Redis resumed, want closed by the probe's late answer", s.Stats().State)
	}
	if _, res := take(t, s, b); res[0].Source != floodgate.SourceStore {
		t.Fatalf("after the breaker closed: %+v, want the store's", res[0])
	}
	t.Logf("the probe waited %s", waited.Round(time.Millisecond))
}
