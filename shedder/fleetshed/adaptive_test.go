package fleetshed_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// A fleet of adaptive instances sums the capacities they learnt: each
// publishes its own through Redis, an instance that publishes none (a
// fixed one, or one of an older version) counts as this instance's own
// share, a stale instance counts its own share alone, and one that leaves
// stops counting at once.
func TestFleetAdaptiveCapacitySums(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	adaptive := func(id string, share int64) *fleetshed.Shedder {
		t.Helper()
		// Min = Max pins the learnt share, so the sums are exact.
		return newFleet(t, srv.NewClient(), clk, id, share,
			fleetshed.Config{Capacity: share, Adaptive: &shedder.AdaptiveCapacity{Min: share, Max: share}})
	}
	a, b := adaptive("a", 30), adaptive("b", 50)
	c := newFleet(t, srv.NewClient(), clk, "c", 100) // fixed: publishes no capacity
	if a.Capacity() != 30 || a.Stats().Capacity != 30 {
		t.Fatalf("before any sync: a's capacity %d, want its own 30", a.Capacity())
	}
	mustSync(t, a, b, c)
	mustSync(t, a, b)
	for _, tc := range []struct {
		f    *fleetshed.Shedder
		want int64
	}{{a, 30 + 50 + 30}, {b, 50 + 30 + 50}, {c, 100}} {
		if got := tc.f.Capacity(); got != tc.want {
			t.Errorf("%s: fleet capacity %d, want %d", tc.f.InstanceID(), got, tc.want)
		}
	}
	// Non-critical traffic is shed at 80% of the summed capacity: 88 on a.
	if start, _ := a.Threshold(); start != 88 {
		t.Errorf("a's threshold %d, want 88 (80%% of 110)", start)
	}
	held := admitN(t, a, floodgate.PriorityWrite, 88)
	if _, ok := admitted(t, a, floodgate.PriorityWrite); ok {
		t.Error("a admitted a write at 88 in flight of threshold 88")
	}
	endAll(held)
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	mustSync(t, a)
	if got := a.Capacity(); got != 30+30 {
		t.Errorf("after b left: a's capacity %d, want 60", got)
	}
	// A Reconfigure to a fixed capacity takes effect at once.
	if err := a.Reconfigure(fleetshed.Config{Capacity: 40, Reserve: 0.5}); err != nil {
		t.Fatal(err)
	}
	if start, _ := a.Threshold(); a.Capacity() != 40 || start != 20 || a.Stats().Adaptive {
		t.Errorf("after Reconfigure: capacity %d, threshold %d, stats %+v", a.Capacity(), start, a.Stats())
	}
	if err := a.Reconfigure(fleetshed.Config{Capacity: 40, Reserve: 1.5}); err == nil || !strings.Contains(err.Error(), "fleetshed: Config: reserve: 1.5 is out of range (0, 1)") {
		t.Errorf("bad Reconfigure: %v", err)
	}
	if got := a.Config(); got.Capacity != 40 || got.Reserve != 0.5 {
		t.Errorf("after a bad Reconfigure: %+v", got)
	}
	// Stale: Redis gone for a TTL, an adaptive instance counts itself alone.
	mustSync(t, b)
	srv.Kill()
	clk.Advance(ttl)
	_ = b.Sync(ctx)
	if !b.Stale() || b.Capacity() != 50 {
		t.Errorf("stale b: stale %v, capacity %d; want its own 50", b.Stale(), b.Capacity())
	}
}

// The capacity hash shares the member set key's Cluster slot, with or
// without a hash tag in the key.
func TestFleetAdaptiveCluster(t *testing.T) {
	wait := redistest.StartClusterAsync(t) // forms while the tests before this one run
	t.Parallel()
	cl := wait()
	clk := clock.New(time.Time{})
	for _, key := range []string{"fg:fleet:{members}", "svc:fleet", "{svc}:fleet"} { // fleet's default key first
		var fs []*fleetshed.Shedder
		for _, id := range []string{"a", "b"} {
			m := members(t, cl.Client(), clk, id, 500*time.Millisecond, ttl, fleet.WithKey(key))
			f, err := fleetshed.New(m, 20)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Reconfigure(fleetshed.Config{Capacity: 20, Adaptive: &shedder.AdaptiveCapacity{Min: 20, Max: 20}}); err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		mustSync(t, fs...)
		mustSync(t, fs...)
		if got := fs[0].Capacity(); got != 40 {
			t.Errorf("key %q: capacity %d, want 40", key, got)
		}
	}
}
