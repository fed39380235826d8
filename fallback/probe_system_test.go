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
	b := liveBuckets[kindLocal]
	// Another store loads the script, with a budget no loaded machine
	// comes near.
	warm, _ := liveStore(t, srv, fallback.WithTimeout(healthyBudget))
	if ok, res := take(t, warm, b); !ok || res[0].Source != floodgate.SourceStore {
		t.Fatalf("healthy take (loads the script): %v %+v", ok, res[0])
	}
	s, _ := liveStore(t, srv, fallback.WithTimeout(budget), fallback.WithClosedTimeout(closedTO),
		fallback.WithFailures(1), fallback.WithOpenInterval(open), fallback.WithSlowGrace(time.Nanosecond))
	// fromStore takes until the store answers one (at most 100 takes,
	// 10 s): a loaded machine can make a healthy call outlive 50ms.
	fromStore := func(what string) {
		t.Helper()
		end := time.Now().Add(10 * time.Second)
		for i := 0; i < 100 && time.Now().Before(end); i++ {
			if _, res := take(t, s, b); res[0].Source == floodgate.SourceStore {
				return
			}
			time.Sleep(open + open/2) // past any open interval a slow call caused
		}
		t.Fatalf("%s: no take answered by the store in 100 takes or 10s", what)
	}
	fromStore("before the pause")
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
	fromStore("after the breaker closed")
	t.Logf("the probe waited %s", waited.Round(time.Millisecond))
}
