package fallback_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestLiveFirstTimeoutIsReconciled: over a batched Redis store (which
// answers abandoned takes late, quota.LateAnswers), the first call of a
// pause that starts long after the store was made, on a store that had
// been fast for longer than any warm-up, is reconciled like every later
// one: decided locally, applied by Redis when it resumes, and charged
// once. Without the late answer Redis would have charged it and the
// local admit would be reported too: one unit twice.
func TestLiveFirstTimeoutIsReconciled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	s, _ := liveStore(t, srv, fallback.WithClock(clk), fallback.WithManualSync(),
		fallback.WithTimeout(20*time.Millisecond), fallback.WithClosedTimeout(20*time.Millisecond))
	b := tokenBucket("late:first", 1, 1000, time.Hour, quota.FailLocal)

	admitted := int64(0)
	takeOne := func(want floodgate.Source) {
		t.Helper()
		ok, res := take(t, s, b)
		if !ok {
			t.Fatalf("take denied: %+v", res[0])
		}
		admitted++
		if res[0].Source != want {
			t.Fatalf("take decided by %v, want %v", res[0].Source, want)
		}
	}
	for range 5 {
		takeOne(floodgate.SourceStore)
	}
	clk.Advance(time.Minute) // long past any warm-up of the store
	for range 5 {
		takeOne(floodgate.SourceStore)
	}

	srv.Pause()
	takeOne(floodgate.SourceLocalFallback)
	srv.Resume()
	if !waitFor(5*time.Second, func() bool { return s.Stats().Late >= 1 }) {
		t.Fatalf("the late answer was never reconciled: %+v", s.Stats())
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.LateApplied != 1 || st.Owed != 0 || st.Charged != 0 {
		t.Errorf("Stats: late applied %d, owed %d, charged %d; want 1, 0, 0", st.LateApplied, st.Owed, st.Charged)
	}
	if got := remaining(t, s, b); got != 1000-admitted {
		t.Fatalf("Redis holds %d of 1000 after %d admitted, want %d: the unit admitted during the pause must be charged once", got, admitted, 1000-admitted)
	}
}
