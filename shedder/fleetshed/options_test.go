package fleetshed_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// unreachable returns a Members on a client that is never called: Admit
// never calls Redis.
func unreachable(t testing.TB) *fleet.Members {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	m, err := fleet.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Every bad argument makes New return an error that names it, and no
// value.
func TestConstructorErrors(t *testing.T) {
	t.Parallel()
	m := unreachable(t)
	static, err := fleet.New(nil, fleet.WithStatic(3))
	if err != nil {
		t.Fatal(err)
	}
	newFleet := func(m *fleet.Members, capacity int64) func() error {
		return func() error {
			f, err := fleetshed.New(m, capacity)
			if f != nil {
				t.Errorf("New returned a Shedder with error %v", err)
			}
			return err
		}
	}
	for _, tc := range []struct {
		name string
		new  func() error
		want string
	}{
		{"fleet members", newFleet(nil, 10), "fleetshed: fleet members is nil"},
		{"static members", newFleet(static, 10), "fleetshed: fleet members count statically"},
		{"fleet capacity", newFleet(m, -1), "fleetshed: fleet capacity -1 must be at least 1"},
		{"fleet capacity max", newFleet(m, shedder.MaxCapacity+1), "must be at most MaxCapacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v does not mention %q", err, tc.want)
			}
		})
	}
}

// TestFleetDefaults: a Config sets a fleet Shedder's capacity, reserve
// and adaptive capacity; its sheds carry package shedder's defaults
// otherwise (the hysteresis band, RetryAfter and default priority) and the
// Policy "fleet-shedder". A Config the Shedder cannot take is refused by
// name, and changes nothing.
func TestFleetDefaults(t *testing.T) {
	t.Parallel()
	f, err := fleetshed.New(unreachable(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	if start, stop := f.Threshold(); start != 8 || stop != 7 {
		t.Fatalf("threshold %d/%d, want 8/7 (reserve 20%%, a band of 5%% of 10 rounded up)", start, stop)
	}
	for _, tc := range []struct {
		cfg  fleetshed.Config
		want string
	}{
		{fleetshed.Config{Capacity: 10, Reserve: 1}, "fleetshed: Config: reserve: 1 is out of range (0, 1)"},
		{fleetshed.Config{Capacity: 10, Adaptive: &shedder.AdaptiveCapacity{Min: 5, Max: 4}}, "max: 4 must be >= min 5"},
		{fleetshed.Config{Capacity: 10, Adaptive: &shedder.AdaptiveCapacity{CPUTarget: 0.5}}, "fleetshed: Config: adaptive.cpu_target: 0.5 needs a CPU meter, and the Shedder has none (give it in AdaptiveCapacity.CPU)"},
		{fleetshed.Config{Capacity: 10, Adaptive: &shedder.AdaptiveCapacity{MemoryTarget: 0.8}}, "fleetshed: Config: adaptive.memory_target: 0.8 needs a memory meter, and the Shedder has none (give it in AdaptiveCapacity.Memory)"},
		{fleetshed.Config{Capacity: 10, Adaptive: &shedder.AdaptiveCapacity{MemoryTarget: -0.1}}, "fleetshed: Config: adaptive.memory_target: -0.1 is out of range [0, 1]"},
	} {
		if err := f.Reconfigure(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Reconfigure(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := f.Reconfigure(fleetshed.Config{Capacity: 10, Reserve: 0.5}); err != nil {
		t.Fatal(err)
	}
	if start, stop := f.Threshold(); start != 5 || stop != 4 {
		t.Fatalf("threshold %d/%d, want 5/4 (reserve 50%%)", start, stop)
	}
	var dones []floodgate.Done
	for range 5 {
		_, done, _ := f.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		dones = append(dones, done)
	}
	d, done, _ := f.Admit(ctx, &floodgate.Request{})
	want := floodgate.Decision{Stage: floodgate.StageShedder, Source: floodgate.SourceShedder,
		Policy: "fleet-shedder", Limit: 10, Remaining: 5, RetryAfter: shedder.DefaultRetryAfter, Priority: shedder.DefaultPriority}
	if done != nil || d != want {
		t.Fatalf("decision %+v, want %+v", d, want)
	}
	endAll(dones)
}

// TestFleetKeyWithoutHashTagRefused: a member set key with a '}' but no
// hash tag is refused: the counts and capacity hashes derived from it
// would land in another Cluster slot ("svc}fleet" and "{}svc:fleet" made
// every Sync fail with CROSSSLOT); a key with a tag, or with no '}', is
// accepted.
func TestFleetKeyWithoutHashTagRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, key := range []string{"svc}fleet", "{}svc:fleet"} {
		m := members(t, srv.NewClient(), nil, "a", time.Second, 5*time.Second, fleet.WithKey(key))
		if _, err := fleetshed.New(m, 20); err == nil || !strings.Contains(err.Error(), "hash tag") {
			t.Errorf("key %q: %v, want an error about its hash tag", key, err)
		}
	}
	for _, key := range []string{"svc:fleet", "{svc}:fleet", "a{b"} {
		m := members(t, srv.NewClient(), nil, "a", time.Second, 5*time.Second, fleet.WithKey(key))
		if _, err := fleetshed.New(m, 20); err != nil {
			t.Errorf("key %q: %v", key, err)
		}
	}
}

// Admit+Done allocates nothing, with a fixed or an adaptive capacity (its
// Done is a pooled ticket).
func TestAdmitAllocatesNothing(t *testing.T) {
	fixed, err := fleetshed.New(unreachable(t), 100)
	if err != nil {
		t.Fatal(err)
	}
	adaptive, err := fleetshed.New(unreachable(t), 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := adaptive.Reconfigure(fleetshed.Config{Capacity: 100, Adaptive: &shedder.AdaptiveCapacity{}}); err != nil {
		t.Fatal(err)
	}
	req := &floodgate.Request{Priority: floodgate.PriorityRead}
	for name, a := range map[string]floodgate.Admitter{"fixed": fixed, "adaptive": adaptive} {
		if name == "adaptive" && raceEnabled {
			continue // sync.Pool drops items at random under the race detector
		}
		allocs := testing.AllocsPerRun(1000, func() {
			_, done, _ := a.Admit(ctx, req)
			done(floodgate.Result{})
		})
		if allocs != 0 {
			t.Errorf("%s Admit+Done allocates %v times per request, want 0", name, allocs)
		}
	}
}

func BenchmarkAdmitDone(b *testing.B) {
	f, err := fleetshed.New(unreachable(b), 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	req := &floodgate.Request{Priority: floodgate.PriorityRead}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, done, _ := f.Admit(ctx, req)
			done(floodgate.Result{})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := &floodgate.Request{Priority: floodgate.PriorityRead}
			for pb.Next() {
				_, done, _ := f.Admit(ctx, r)
				done(floodgate.Result{})
			}
		})
	})
}
