//go:build system

package localfirst_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
)

// TestReportTimedOutOnAPausedRedis: a report call sent to a Redis that is
// stopped (SIGSTOP) times out; when Redis continues, it may run the
// command left in its socket, or Resolve may get there first and make
// sure it never runs. Either way each unit is charged once.
//
// Bound: 39 of 100 left, the 61 units spent each charged once, a count
// the scenario fixes in both branches (applied late, or resolved first).
// Redis stays stopped until the Sync has returned, so its report times
// out however slowly the machine runs; the sync timeout, 2 s, bounds the
// round trips of the Close that follows, which take milliseconds even on
// a loaded 2-core machine.
func TestReportTimedOutOnAPausedRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(t0)
	rs := redisLedger(t, srv, clk)
	s, err := localfirst.New(rs, rs, localfirst.WithClock(clk), localfirst.WithManualSync(),
		localfirst.WithSyncTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b := bucket("{paused}", quota.Async, 1, 100)
	for range 60 { // past half the share: due every quarter interval
		take(t, s, b)
	}
	clk.Advance(20 * time.Millisecond)
	srv.Pause()
	err = s.Sync(context.Background())
	srv.Resume()
	if err == nil {
		t.Fatal("a report to a stopped Redis did not time out")
	}
	// Redis runs what it had read (or not) as soon as it continues.
	applied := false
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if remainingOf(t, rs, b) == 40 {
			applied = true
			break
		}
	}
	t.Logf("the timed-out report was applied by Redis after all: %v", applied)
	take(t, s, b)
	clk.Advance(20 * time.Millisecond)
	if err := s.Close(context.Background()); err != nil { // resolves the call, reports the rest
		t.Fatalf("Close after Redis continued: %v", err)
	}
	if got := remainingOf(t, rs, b); got != 39 {
		t.Fatalf("the ledger has %d left, want 39 (61 spent, each charged once)", got)
	}
}
