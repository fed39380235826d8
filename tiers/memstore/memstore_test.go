package memstore_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/storetest"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// newStore returns a Store configured by opts, failing the test if New
// refuses them.
func newStore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		return newStore(t, memstore.WithClock(clk))
	})
}

// The suite again with one shard and a cap that is never reached: lock
// ordering and key placement must not change any decision.
func TestConformanceOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		return newStore(t, memstore.WithClock(clk), memstore.WithShards(1))
	})
}

func TestBadOptions(t *testing.T) {
	cases := []struct {
		opts []memstore.Option
		want string
	}{
		{[]memstore.Option{memstore.WithClock(nil)}, "memstore: WithClock: clock is nil"},
		{[]memstore.Option{memstore.WithMaxKeys(0)}, "memstore: WithMaxKeys: key cap 0 must be >= 1"},
		{[]memstore.Option{memstore.WithMaxKeys(-5)}, "memstore: WithMaxKeys: key cap -5 must be >= 1"},
		{[]memstore.Option{memstore.WithShards(0)}, "memstore: WithShards: shard count 0 must be in [1, 65536]"},
		{[]memstore.Option{memstore.WithShards(1 << 17)}, "memstore: WithShards: shard count 131072 must be in [1, 65536]"},
		{[]memstore.Option{nil}, "memstore: nil Option"},
		// Every bad option is named, not only the first.
		{[]memstore.Option{memstore.WithMaxKeys(0), memstore.WithClock(clock.New(time.Time{})), nil, memstore.WithShards(0)},
			"memstore: WithMaxKeys: key cap 0 must be >= 1\nmemstore: nil Option\nmemstore: WithShards: shard count 0 must be in [1, 65536]"},
	}
	for _, c := range cases {
		s, err := memstore.New(c.opts...)
		if s != nil || err == nil || err.Error() != c.want {
			t.Errorf("New = %v, %v; want nil, %q", s, err, c.want)
		}
	}
}

// A refused take is refused with quota.ValidateTake's error (storetest's
// BadInput checks every case) and leaves no state behind.
func TestBadTakeLeavesNoState(t *testing.T) {
	s := newStore(t)
	ok := quota.Limit{Rate: 1, Period: time.Second, Burst: 1}
	cases := []struct {
		b   []quota.Bucket
		res int
	}{
		{[]quota.Bucket{{Key: "a", Limit: ok, Cost: 1}}, 0},
		{[]quota.Bucket{{Key: "a", Limit: ok, Cost: 1}, {Limit: ok, Cost: 1}}, 2},
		{[]quota.Bucket{{Key: "a", Limit: ok, Cost: 1}, {Key: "b", Limit: ok, Cost: -2}}, 2},
		{[]quota.Bucket{{Key: "a", Limit: ok, Cost: 1}, {Key: "b", Limit: ok, Cost: 1}, {Key: "a", Limit: ok, Cost: 1}}, 3},
	}
	for _, c := range cases {
		res := make([]quota.Result, c.res)
		want := quota.ValidateTake(c.b, res)
		if _, err := s.Take(context.Background(), c.b, res); err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("Take error = %v, want %v", err, want)
		}
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("rejected takes created %d keys", n)
	}
}

var fw10s = quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: 10 * time.Second}

func take(t *testing.T, s *memstore.Store, key string, l quota.Limit, cost int64) quota.Result {
	t.Helper()
	var res [1]quota.Result
	if _, err := s.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: cost}}, res[:]); err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// With one shard of cap 3 (at most evictSample = 32 keys, so every entry is
// examined) a full store evicts exactly the live entry closest to expiry.
func TestCapEvictsClosestToExpiry(t *testing.T) {
	clk := clock.New(time.Time{}) // Epoch: a whole 10 s window starts here
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithMaxKeys(3))
	min1 := quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: time.Minute}
	// "late" expires at the end of its 1 min window (60 s); "soon" and
	// "mid" are fixed windows of 10 s charged at 0 s and at 10 s, so they
	// expire at 10 s and 20 s.
	take(t, s, "late", min1, 1)
	take(t, s, "soon", fw10s, 2)
	clk.Set(clock.Epoch.Add(5 * time.Second))
	take(t, s, "soon", fw10s, 1) // still the window [0,10 s): expires at 10 s
	clk.Set(clock.Epoch.Add(9 * time.Second))
	// "mid": a 20 s fixed window expiring at 20 s.
	take(t, s, "mid", quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: 20 * time.Second}, 1)
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
	// A fourth key: nothing has expired at 9 s, so "soon" (expires at 10 s)
	// is evicted.
	take(t, s, "new", fw10s, 1)
	if n := s.Len(); n != 3 {
		t.Fatalf("Len after eviction = %d, want 3", n)
	}
	// "soon" starts again from a full bucket; the others kept their counts.
	if r := take(t, s, "late", min1, 1); r.Remaining != 3 {
		t.Fatalf("late: remaining %d, want 3 (kept)", r.Remaining)
	}
	// Touching "late" did not evict anything (it exists).
	if r := take(t, s, "mid", quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: 20 * time.Second}, 1); r.Remaining != 3 {
		t.Fatalf("mid: remaining %d, want 3 (kept)", r.Remaining)
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
	// Re-inserting "soon" is a new key in a full shard: the closest to
	// expiry now is "new" (window [0,10 s), expires at 10 s) and it goes.
	if r := take(t, s, "soon", fw10s, 1); r.Remaining != 4 {
		t.Fatalf("soon after eviction: remaining %d, want 4 (a new bucket)", r.Remaining)
	}
	if r := take(t, s, "mid", quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: 20 * time.Second}, 1); r.Remaining != 2 {
		t.Fatalf("mid: remaining %d, want 2 (kept)", r.Remaining)
	}
	if r := take(t, s, "late", min1, 1); r.Remaining != 2 {
		t.Fatalf("late: remaining %d, want 2 (kept)", r.Remaining)
	}
}

// A full shard deletes every expired entry it examines before evicting a
// live one.
func TestCapDeletesExpiredFirst(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithMaxKeys(4))
	hour := quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: time.Hour}
	take(t, s, "a", fw10s, 1) // expires at 10 s
	take(t, s, "b", fw10s, 1) // expires at 10 s
	take(t, s, "c", hour, 1)  // expires at 1 h
	take(t, s, "d", hour, 1)  // expires at 1 h
	clk.Set(clock.Epoch.Add(10 * time.Second))
	take(t, s, "e", hour, 1) // full: a and b are expired and both go
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3 (a and b deleted, e added)", n)
	}
	for _, k := range []string{"c", "d"} {
		if r := take(t, s, k, hour, 1); r.Remaining != 3 {
			t.Fatalf("%s: remaining %d, want 3 (live entries are kept)", k, r.Remaining)
		}
	}
}

// An entry is never evicted to make room for another key of the same Take.
func TestCapNeverEvictsTheSameTake(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithMaxKeys(2))
	hour := quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: time.Hour}
	take(t, s, "old", hour, 1)
	res := make([]quota.Result, 2)
	// "a" (expiring at 10 s) is inserted first and would be the closest to
	// expiry when "b" needs room: "old" must go instead.
	if ok, err := s.Take(context.Background(), []quota.Bucket{{Key: "a", Limit: fw10s, Cost: 1}, {Key: "b", Limit: hour, Cost: 1}}, res); err != nil || !ok {
		t.Fatalf("Take = %v, %v", ok, err)
	}
	if r := take(t, s, "a", fw10s, 1); r.Remaining != 3 {
		t.Fatalf("a: remaining %d, want 3 (charged by the take, then kept)", r.Remaining)
	}
	if r := take(t, s, "b", hour, 1); r.Remaining != 3 {
		t.Fatalf("b: remaining %d, want 3", r.Remaining)
	}
}

// Idle buckets are removed without a cap being reached: each new key
// sweeps a few entries of its shard.
func TestExpiredEntriesAreSwept(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1))
	for i := range 4 {
		take(t, s, "idle"+string(rune('a'+i)), fw10s, 1)
	}
	clk.Set(clock.Epoch.Add(time.Minute))
	take(t, s, "fresh", fw10s, 1) // examines up to 4 entries: all expired
	if n := s.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
}

// A sliding window log ring grows past its initial size, wraps, and keeps
// exact counts (runs of one timestamp per unit of time).
func TestSlidingLogRingWraps(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newStore(t, memstore.WithClock(clk))
	l := quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 10, Period: 10 * time.Millisecond}
	// One take per ms: at most 10 in any 10 ms window, and with one per ms
	// the log holds 10 runs; after the first 10 ms every take sees 9 in
	// (now-10 ms, now) and is allowed with 0 remaining.
	for i := range 100 {
		clk.Set(clock.Epoch.Add(time.Duration(i) * time.Millisecond))
		r := take(t, s, "log", l, 1)
		want := int64(9 - i)
		if i >= 9 {
			want = 0
		}
		if !r.Allowed || r.Remaining != want {
			t.Fatalf("take %d: allowed=%v remaining=%d, want allowed with %d", i, r.Allowed, r.Remaining, want)
		}
		if i >= 9 {
			if r := take(t, s, "log", l, 1); r.Allowed {
				t.Fatalf("take %d: a second take in the same ms was allowed with 10 in the window", i)
			}
		}
	}
}

// The clock going backwards (fake clocks can) keeps the log sorted: the
// retry-after still names the oldest unit.
func TestSlidingLogClockBackwards(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newStore(t, memstore.WithClock(clk))
	l := quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 3, Period: 10 * time.Second}
	clk.Set(clock.Epoch.Add(5 * time.Second))
	take(t, s, "log", l, 1)
	clk.Set(clock.Epoch.Add(2 * time.Second))
	take(t, s, "log", l, 1)
	clk.Set(clock.Epoch.Add(6 * time.Second))
	take(t, s, "log", l, 1)
	// Log [2 s, 5 s, 6 s]; at 7 s a take is denied, retry = 2 + 10 - 7 = 5 s.
	clk.Set(clock.Epoch.Add(7 * time.Second))
	r := take(t, s, "log", l, 1)
	if r.Allowed || r.RetryAfter != 5*time.Second || r.Reset != 9*time.Second {
		t.Fatalf("got allowed=%v retry=%v reset=%v, want denied, 5s, 9s", r.Allowed, r.RetryAfter, r.Reset)
	}
}

// Buckets with more than the stack-allocated number of levels work the
// same (the slow path allocates).
func TestManyBuckets(t *testing.T) {
	s := newStore(t, memstore.WithClock(clock.New(time.Time{})))
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 1, Period: time.Hour}
	var bs []quota.Bucket
	for i := range 20 {
		bs = append(bs, quota.Bucket{Key: strings.Repeat("k", 5*i+1), Limit: l, Cost: 1}) // 1..96 bytes: every entry layout
	}
	res := make([]quota.Result, len(bs))
	if ok, err := s.Take(context.Background(), bs, res); err != nil || !ok {
		t.Fatalf("first Take = %v, %v", ok, err)
	}
	if ok, err := s.Take(context.Background(), bs, res); err != nil || ok {
		t.Fatalf("second Take = %v, %v, want a deny", ok, err)
	}
	for i, r := range res {
		if r.Allowed || r.Remaining != 0 {
			t.Fatalf("res[%d] = %+v", i, r)
		}
	}
}

// Entries that expire at the same instant are evicted smallest key first,
// so the choice is deterministic.
func TestCapTieEvictsSmallestKey(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithMaxKeys(2))
	hour := quota.Limit{Algorithm: quota.FixedWindow, Rate: 5, Period: time.Hour}
	take(t, s, "b", hour, 1)
	take(t, s, "a", hour, 1) // both expire at 1 h
	take(t, s, "c", hour, 1) // evicts "a"
	if r := take(t, s, "b", hour, 1); r.Remaining != 3 {
		t.Fatalf("b: remaining %d, want 3 (kept)", r.Remaining)
	}
	// "a" comes back as a new bucket, evicting "b" (tied with "c" at 1 h,
	// and "b" < "c").
	if r := take(t, s, "a", hour, 1); r.Remaining != 4 {
		t.Fatalf("a: remaining %d, want 4 (evicted, new bucket)", r.Remaining)
	}
	if r := take(t, s, "c", hour, 1); r.Remaining != 3 {
		t.Fatalf("c: remaining %d, want 3 (kept)", r.Remaining)
	}
}

// A burst of 1e9 refilled at 1 per 366 days resets in about 1e9 years:
// Reset and RetryAfter saturate at the largest Duration instead of
// wrapping negative.
func TestHugeDurationsSaturate(t *testing.T) {
	s := newStore(t, memstore.WithClock(clock.New(time.Time{})))
	for _, alg := range []quota.Algorithm{quota.TokenBucket, quota.GCRA} {
		l := quota.Limit{Algorithm: alg, Rate: 1, Period: quota.MaxPeriod, Burst: quota.MaxRate}
		key := "huge:" + alg.String()
		if r := take(t, s, key, l, quota.MaxRate); !r.Allowed || r.Reset != time.Duration(math.MaxInt64) {
			t.Fatalf("%s: %+v, want allowed with Reset = max Duration", alg, r)
		}
		if r := take(t, s, key, l, quota.MaxRate); r.Allowed || r.RetryAfter != time.Duration(math.MaxInt64) || r.Reset != time.Duration(math.MaxInt64) {
			t.Fatalf("%s: %+v, want denied with RetryAfter = Reset = max Duration", alg, r)
		}
	}
}

// Many goroutines over many keys in a small store: insertions, sweeps and
// evictions race with takes on other shards. The race detector watches;
// the cap must hold at every step and each bucket's count must stay within
// its limit.
func TestConcurrentChurnKeepsCap(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(4), memstore.WithMaxKeys(64))
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 1000, Period: time.Hour}
	big := quota.Limit{Algorithm: quota.FixedWindow, Rate: 1_000_000, Period: time.Hour}
	done := make(chan error, 8)
	for g := range 8 {
		go func() {
			res := make([]quota.Result, 3)
			for i := range 500 {
				bs := []quota.Bucket{
					{Key: "tenant", Limit: big, Cost: 1},
					{Key: "user" + strconv.Itoa((g*500+i)%200), Limit: l, Cost: 1},
					{Key: "ip" + strconv.Itoa((g*7+i)%150), Limit: l, Cost: 1},
				}
				ok, err := s.Take(context.Background(), bs, res)
				if err != nil {
					done <- err
					return
				}
				// No level can run out (at most 4000 takes), so every
				// take allows and charges the user, evicted or not.
				if !ok || res[1].Remaining < 0 || res[1].Remaining > 999 {
					done <- fmt.Errorf("take %d: allowed=%v, user remaining %d", i, ok, res[1].Remaining)
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := s.Len(); n > 64 {
			t.Fatalf("Len = %d above the cap 64", n)
		}
	}
	if n := s.Len(); n != 64 {
		t.Fatalf("Len = %d, want the store full at 64 after 350 distinct keys", n)
	}
}

// TestGiveBackUndoesTake: a Settle giving back (a negative cost) what a
// Take charged leaves a bucket exactly as if the Take had not happened:
// the same Results, to the microsecond, for every probe after it (at the
// take's time and later), token bucket and GCRA, also when the give-back
// comes later than the take.
func TestGiveBackUndoesTake(t *testing.T) {
	ctx := context.Background()
	for _, l := range []quota.Limit{
		{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 20},
		{Algorithm: quota.TokenBucket, Rate: 3, Period: time.Second, Burst: 7},
		{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 20},
		{Algorithm: quota.GCRA, Rate: 3, Period: time.Second, Burst: 7},
	} {
		for _, later := range []time.Duration{0, 70 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s_%d_per_s/give_back_after_%s", l.Algorithm, l.Rate, later), func(t *testing.T) {
				clk := clock.New(time.Time{})
				s := newStore(t, memstore.WithClock(clk))
				// Both buckets are half used; "undone" is then charged 4
				// and given 4 back.
				take(t, s, "undone", l, 3)
				take(t, s, "kept", l, 3)
				clk.Advance(30 * time.Millisecond)
				if r := take(t, s, "undone", l, 4); !r.Allowed {
					t.Fatalf("take of 4: %+v", r)
				}
				clk.Advance(later)
				if err := s.Settle(ctx, []quota.Bucket{{Key: "undone", Limit: l, Cost: -4}}, nil); err != nil {
					t.Fatal(err)
				}
				for _, step := range []struct {
					after time.Duration
					cost  int64
				}{{0, 0}, {0, 5}, {0, 30}, {10 * time.Millisecond, 2}, {time.Second, 1}} {
					clk.Advance(step.after)
					got, want := take(t, s, "undone", l, step.cost), take(t, s, "kept", l, step.cost)
					if got != want {
						t.Fatalf("cost %d after %s: bucket given back to %+v, untouched bucket %+v", step.cost, step.after, got, want)
					}
				}
			})
		}
	}
}

// TestGiveBackAbsentAndZero: giving units back (Settle of a negative
// cost) to an absent bucket, or a Settle of cost 0, creates no state; and
// give-backs do not allocate.
func TestGiveBackAbsentAndZero(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 20}
	bs := []quota.Bucket{{Key: "a", Limit: l, Cost: -3}, {Key: "b", Limit: l, Cost: 0}}
	if err := s.Settle(ctx, bs, nil); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("%d states after give-backs to absent buckets, want 0", n)
	}
	take(t, s, "a", l, 5)
	if allocs := testing.AllocsPerRun(100, func() {
		if err := s.Settle(ctx, bs, nil); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("a give-back allocates %.1f times, want 0", allocs)
	}
}
