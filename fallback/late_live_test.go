package fallback_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestLiveFirstTimeoutIsReconciled: over a batched Redis store (which
// answers abandoned takes late, lateanswer.Receiver), the first call of a
// pause that starts long after the store was made, on a store that had
// been fast for longer than any warm-up, is reconciled like every later
// one: decided locally, applied by Redis when it resumes, and charged
// once. Without the late answer Redis would have charged it and the
// local admit would be reported too: one unit twice. The healthy takes
// have a budget (pauseBudget) no loaded machine comes near, so only the
// stopped server makes a take run out of it.
func TestLiveFirstTimeoutIsReconciled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	s, _ := liveStore(t, srv, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithTimeout(pauseBudget))
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
	if !waitFor(lateWait, func() bool { return s.Stats().Late >= 1 }) {
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

// TestSyncWaitsForLateCalls: a take denied locally during a pause, whose
// call Redis applies when it resumes, is given back by the time Sync
// returns: Sync, the hand-over before a process exits, waits for the late
// calls still running, so a process that syncs and leaves does not leave
// Redis charged for a take it denied. Redis resumes 100ms after the take
// returned (if the test goroutine is slower than that to call Sync, the
// call is already matched and Sync has nothing to wait for: the test
// passes without testing the wait, never fails for it). The healthy take
// has a budget no loaded machine comes near (pauseBudget).
func TestSyncWaitsForLateCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	s, _ := liveStore(t, srv, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithInstances(func() int { return 2 }),
		fallback.WithTimeout(pauseBudget))
	b := tokenBucket("late:sync", 1, 10, time.Hour, quota.FailLocal)
	b.Cost = 0
	if _, res := take(t, s, b); res[0].Source != floodgate.SourceStore { // Redis has said 10 are left
		t.Fatalf("healthy take: %+v, want Redis's answer", res[0])
	}
	b.Cost = 8 // above this instance's local share, 10/2

	srv.Pause()
	if ok, res := take(t, s, b); ok || res[0].Source != floodgate.SourceLocalFallback {
		t.Fatalf("take during the pause: %v %+v, want denied locally", ok, res[0])
	}
	time.AfterFunc(100*time.Millisecond, func() { srv.Resume() })
	ctx, cancel := context.WithTimeout(context.Background(), lateWait)
	defer cancel()
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.LateApplied != 1 || st.GivenBack != 8 {
		t.Fatalf("after Sync: late applied %d, given back %d; want 1, 8 (Sync returned before the late call was matched)", st.LateApplied, st.GivenBack)
	}
	if got := remaining(t, s, b); got != 10 {
		t.Fatalf("Redis holds %d after Sync, want 10: the take denied locally must not stay charged", got)
	}
}

// TestLiveClusterTimeoutIsReconciled: TestLiveFirstTimeoutIsReconciled
// on a 3-master Redis Cluster, with a take of two buckets on two masters,
// so that Redis decides it in two parts. x's master is paused (SIGSTOP):
// the take runs out of its budget and is decided locally; when the master
// resumes, both parts charge, and the take's late answer (the store
// finishes an abandoned multi-slot take as a whole) is matched with the
// local admit: each bucket is charged once, not again by a report.
// Without the late answer, the first call of a stall on a store fast for
// longer than any warm-up is abandoned, its outcome unknown, and both
// units are charged twice. As there, the healthy takes have a budget no
// loaded machine comes near (pauseBudget), and the cluster client's read
// timeout is longer than the pause.
func TestLiveClusterTimeoutIsReconciled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	// The cluster forms while the tests before this one run.
	wait := redistest.StartClusterAsync(t, redistest.WithClientTimeouts(time.Second, 10*time.Second))
	t.Parallel()
	cl := wait()
	c := cl.Client()
	ctx := context.Background()
	master := func(key string) string {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	x, y := "{late=x}:k", ""
	for i := 0; i < 100 && y == ""; i++ {
		if k := fmt.Sprintf("{late=y%d}:k", i); master(k) != master(x) {
			y = k
		}
	}
	var nx *redistest.Server
	for _, n := range cl.Nodes() {
		if n.Addr() == master(x) {
			nx = n
		}
	}
	if y == "" || nx == nil {
		t.Fatal("no two keys on different masters")
	}
	primary, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	clk := clock.New(time.Unix(1_700_000_000, 0))
	s, err := fallback.New(primary, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithTimeout(pauseBudget),
		fallback.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	bx, by := tokenBucket(x, 1, 1000, time.Hour, quota.FailLocal), tokenBucket(y, 1, 1000, time.Hour, quota.FailLocal)

	admitted := int64(0)
	takeBoth := func(want floodgate.Source) {
		t.Helper()
		ok, res := take(t, s, bx, by)
		if !ok {
			t.Fatalf("take denied: %+v", res)
		}
		admitted++
		if res[0].Source != want || res[1].Source != want {
			t.Fatalf("take decided by %v and %v, want %v", res[0].Source, res[1].Source, want)
		}
	}
	for range 5 {
		takeBoth(floodgate.SourceStore)
	}
	clk.Advance(time.Minute) // long past any warm-up of the store
	takeBoth(floodgate.SourceStore)

	nx.Pause()
	takeBoth(floodgate.SourceLocalFallback)
	nx.Resume()
	if !waitFor(lateWait, func() bool { return s.Stats().Late >= 1 }) {
		t.Fatalf("the late answer was never reconciled: %+v", s.Stats())
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.LateApplied != 1 || st.Owed != 0 || st.Charged != 0 {
		t.Errorf("Stats: late applied %d, owed %d, charged %d; want 1, 0, 0", st.LateApplied, st.Owed, st.Charged)
	}
	for _, b := range []quota.Bucket{bx, by} {
		if got := remaining(t, s, b); got != 1000-admitted {
			t.Errorf("%s holds %d of 1000 after %d admitted, want %d: the take admitted during the pause must be charged once", b.Key, got, admitted, 1000-admitted)
		}
	}
}
