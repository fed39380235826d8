package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// Both stores give units back the one way callers have: a Settle of a
// negative cost.
var (
	_ quota.Settler = (*redisstore.Store)(nil)
	_ quota.Settler = (*memstore.Store)(nil)
)

// giveBack gives each bucket's Cost units back: a Settle of the negated
// costs.
func giveBack(ctx context.Context, st quota.Settler, bs ...quota.Bucket) error {
	neg := make([]quota.Bucket, len(bs))
	for i, b := range bs {
		b.Cost = -b.Cost
		neg[i] = b
	}
	return st.Settle(ctx, neg, nil)
}

var giveBackLimits = []quota.Limit{
	{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 20},
	{Algorithm: quota.TokenBucket, Rate: 3, Period: time.Second, Burst: 7},
	{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 20},
	{Algorithm: quota.GCRA, Rate: 3, Period: time.Second, Burst: 7},
}

// TestGiveBackUndoesTake: a Settle giving back (a negative cost) what a
// Take charged leaves a bucket exactly as if the Take had not happened:
// the same Results, to the microsecond, for every probe after it, token
// bucket and GCRA, also when the give-back comes later than the take; and
// memstore agrees at every step. On a cluster the key given back to and
// its twin sit in different slots.
func TestGiveBackUndoesTake(t *testing.T) {
	t.Parallel()
	standaloneAndCluster(t, giveBackUndoesTake)
}

// giveBackUndoesTake is TestGiveBackUndoesTake on client c, its stores
// built with opts.
func giveBackUndoesTake(t *testing.T, c redis.UniversalClient, opts ...redisstore.Option) {
	ctx := context.Background()
	for _, l := range giveBackLimits {
		for _, later := range []time.Duration{0, 70 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s_%d_per_s/give_back_after_%s", l.Algorithm, l.Rate, later), func(t *testing.T) {
				clk := clock.New(time.Time{})
				rs := fakeTimeStore(t, c, clk, opts...)
				ms, err := memstore.New(memstore.WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				prefix := fmt.Sprintf("undo:%s:%d:%d:", l.Algorithm, l.Rate, later)
				undone, kept := prefix+"{u}", prefix+"{k}"
				type store = quota.Settler
				both := func(f func(st store) quota.Result) quota.Result {
					t.Helper()
					got, want := f(rs), f(ms)
					got.Source, want.Source = "", ""
					if got != want {
						t.Fatalf("redisstore %+v, memstore %+v", got, want)
					}
					return got
				}
				take := func(key string, cost int64) quota.Result {
					t.Helper()
					return both(func(st store) quota.Result {
						_, res := mustTake(t, st, []quota.Bucket{bucket(key, l, cost)})
						return res[0]
					})
				}
				take(undone, 3)
				take(kept, 3)
				clk.Advance(30 * time.Millisecond)
				if r := take(undone, 4); !r.Allowed {
					t.Fatalf("take of 4: %+v", r)
				}
				clk.Advance(later)
				both(func(st store) quota.Result {
					if err := giveBack(ctx, st, bucket(undone, l, 4)); err != nil {
						t.Fatal(err)
					}
					return quota.Result{}
				})
				for _, step := range []struct {
					after time.Duration
					cost  int64
				}{{0, 0}, {0, 5}, {0, 30}, {10 * time.Millisecond, 2}, {time.Second, 1}} {
					clk.Advance(step.after)
					if got, want := take(undone, step.cost), take(kept, step.cost); got != want {
						t.Fatalf("cost %d after %s: bucket given back to %+v, untouched bucket %+v", step.cost, step.after, got, want)
					}
				}
			})
		}
	}
}

// TestGiveBackRedisTime: on Redis TIME (no WithClock), a Settle of a
// negative cost gives back what a take charged, capped at the capacity,
// and keeps the key's TTL; an absent key stays absent. The rates are slow
// enough (1 per hour) that the refill while the test runs rounds away.
func TestGiveBackRedisTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.NewClient()
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, alg := range []quota.Algorithm{quota.TokenBucket, quota.GCRA} {
		l := quota.Limit{Algorithm: alg, Rate: 1, Period: time.Hour, Burst: 10}
		key := "rt:" + alg.String()
		if ok, res := mustTake(t, st, []quota.Bucket{bucket(key, l, 4)}); !ok || res[0].Remaining != 6 {
			t.Fatalf("%s: take 4 of 10: %v %+v", alg, ok, res[0])
		}
		ttl := c.PTTL(ctx, key).Val()
		if err := giveBack(ctx, st, bucket(key, l, 3)); err != nil {
			t.Fatal(err)
		}
		if after := c.PTTL(ctx, key).Val(); after <= 0 || after > ttl {
			t.Fatalf("%s: TTL %s before the give-back, %s after: want it kept", alg, ttl, after)
		}
		if _, res := mustTake(t, st, []quota.Bucket{bucket(key, l, 0)}); res[0].Remaining != 9 {
			t.Fatalf("%s: after giving back 3 of 4: %+v, want 9 remaining", alg, res[0])
		}
		// More than was charged: capped at the burst.
		if err := giveBack(ctx, st, bucket(key, l, 50)); err != nil {
			t.Fatal(err)
		}
		if _, res := mustTake(t, st, []quota.Bucket{bucket(key, l, 0)}); res[0].Remaining != 10 || res[0].Reset != 0 {
			t.Fatalf("%s: after giving back more than was charged: %+v, want 10 remaining, reset 0", alg, res[0])
		}
	}
	// Absent keys stay absent.
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 10}
	if err := giveBack(ctx, st, bucket("rt:absent", l, 3)); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, "rt:absent").Val(); n != 0 {
		t.Fatal("a give-back to an absent key created it")
	}
}

// TestGiveBackRoundTrips: a Settle giving units back is one EVALSHA on a
// standalone Redis whatever its number of buckets, none when every cost
// is 0; after SCRIPT FLUSH one EVALSHA answered NOSCRIPT and one EVAL. On
// a cluster (the shared one: no test flushes its scripts) it is one script
// call per slot.
func TestGiveBackRoundTrips(t *testing.T) {
	t.Parallel()
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 10}
	four := []quota.Bucket{bucket("{a}:1", l, 1), bucket("{b}:2", l, 1), bucket("{a}:3", l, 1), bucket("{c}:4", l, 1)}
	ctx := context.Background()

	srv := redistest.Start(t)
	c := srv.NewClient()
	cnt := newCounter()
	c.AddHook(cnt)
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mustTake(t, st, four)
	cnt.take()
	if err := giveBack(ctx, st, four...); err != nil {
		t.Fatal(err)
	}
	if got := cnt.take(); fmt.Sprint(got) != fmt.Sprint(map[string]int{"evalsha": 1}) {
		t.Fatalf("give-back of 4 buckets sent %v, want one evalsha", got)
	}
	if err := giveBack(ctx, st, bucket("{a}:1", l, 0)); err != nil {
		t.Fatal(err)
	}
	if got := cnt.take(); len(got) != 0 {
		t.Fatalf("Settle of cost 0 sent %v, want nothing", got)
	}
	srv.ScriptFlush()
	if err := giveBack(ctx, st, four...); err != nil {
		t.Fatalf("give-back after SCRIPT FLUSH: %v", err)
	}
	if got := cnt.take(); got["evalsha"] != 1 || got["eval"] != 1 || len(got) != 2 {
		t.Fatalf("give-back after SCRIPT FLUSH sent %v, want one evalsha (NOSCRIPT) and one eval", got)
	}

	cc, prefix := redisstore.SharedCluster(t)
	ccnt := newCounter()
	cc.AddHook(ccnt)
	cst, err := redisstore.New(cc, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer cst.Close()
	mustTake(t, cst, four)
	ccnt.take()
	if err := giveBack(ctx, cst, four...); err != nil {
		t.Fatal(err)
	}
	if got := ccnt.take(); got["evalsha"] != 3 || len(got) != 1 {
		t.Fatalf("cluster give-back of 4 buckets in 3 slots sent %v, want 3 evalsha", got)
	}
	if _, res := mustTake(t, cst, []quota.Bucket{bucket("{a}:1", l, 0), bucket("{a}:3", l, 0)}); res[0].Remaining != 10 || res[1].Remaining != 10 {
		t.Fatalf("after the cluster give-back: %+v, want both full", res)
	}
}

// TestGiveBackLiftsDenial: a Settle that gives units back drops the
// bucket's cached denial, so the next take asks Redis and is admitted by
// the units given back, standalone and on a cluster; a Settle that
// charges more keeps it.
func TestGiveBackLiftsDenial(t *testing.T) {
	t.Parallel()
	standaloneAndCluster(t, giveBackLiftsDenial)
}

// giveBackLiftsDenial is TestGiveBackLiftsDenial on client c, its store
// built with opts.
func giveBackLiftsDenial(t *testing.T, c redis.UniversalClient, opts ...redisstore.Option) {
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, c, clk, append(opts, redisstore.WithDenialCache(10))...)
	ctx := context.Background()
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 2}
	// a and b in different cluster slots; both full, then denied and cached.
	a := quota.Bucket{Key: "{x}fd:a", Limit: l, Cost: 2, CacheDenials: true}
	b := quota.Bucket{Key: "{y}fd:b", Limit: l, Cost: 2, CacheDenials: true}
	for _, k := range []quota.Bucket{a, b} {
		mustTake(t, st, []quota.Bucket{k})
		if ok, res := mustTake(t, st, []quota.Bucket{k}); ok || res[0].Source != floodgate.SourceStore {
			t.Fatalf("%s: second take: %v %+v, want a store deny", k.Key, ok, res[0])
		}
		if ok, res := mustTake(t, st, []quota.Bucket{k}); ok || res[0].Source != floodgate.SourceCache {
			t.Fatalf("%s: third take: %v %+v, want a cached deny", k.Key, ok, res[0])
		}
	}
	// One Settle charges a one more unit and gives b its 2 back: a's
	// denial stays cached, b's is lifted.
	more, back := a, b
	more.Cost, back.Cost = 1, -2
	if err := st.Settle(ctx, []quota.Bucket{more, back}, nil); err != nil {
		t.Fatal(err)
	}
	if ok, res := mustTake(t, st, []quota.Bucket{a}); ok || res[0].Source != floodgate.SourceCache {
		t.Fatalf("a after a Settle charging it: %v %+v, want still a cached deny", ok, res[0])
	}
	if ok, res := mustTake(t, st, []quota.Bucket{b}); !ok || res[0].Source != floodgate.SourceStore {
		t.Fatalf("b after a Settle giving 2 back: %v %+v, want allowed by the store", ok, res[0])
	}
}

// TestGiveBackAllocs: a Settle giving units back allocates no more than an
// unbatched Take of the same buckets (what the go-redis command needs),
// and nothing for buckets of cost 0, whose validation allocates nothing.
func TestGiveBackAllocs(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.NewClient(), redisstore.WithBatching(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 20}
	bs := []quota.Bucket{bucket("al:a", l, 1), bucket("al:b", l, 1), bucket("al:c", l, 1)}
	back := []quota.Bucket{bucket("al:a", l, -1), bucket("al:b", l, -1), bucket("al:c", l, -1)}
	ctx := context.Background()
	zero := []quota.Bucket{bucket("al:a", l, 0)}
	if a := testing.AllocsPerRun(50, func() { _ = st.Settle(ctx, zero, nil) }); a != 0 {
		t.Fatalf("a Settle of cost 0 allocates %.0f times, want 0", a)
	}
	if raceEnabled {
		t.Skip("allocation counts vary under the race detector (sync.Pool drops items at random)")
	}
	var res [3]quota.Result
	// The least of a few measurements: go-redis's pool may dial or grow a
	// buffer during any one of them on a loaded machine.
	least := func(f func()) float64 {
		m := testing.AllocsPerRun(50, f)
		for range 4 {
			m = min(m, testing.AllocsPerRun(50, f))
		}
		return m
	}
	take := least(func() {
		if _, err := st.Take(ctx, bs, res[:]); err != nil {
			t.Fatal(err)
		}
	})
	given := least(func() {
		if err := st.Settle(ctx, back, nil); err != nil {
			t.Fatal(err)
		}
	})
	if given > take {
		t.Fatalf("a give-back of 3 buckets allocates %.0f times, a Take of them %.0f", given, take)
	}
}

// standaloneAndCluster runs f in parallel subtests on a redis-server of
// its own and on the package's shared cluster, under a key prefix of the
// test's.
func standaloneAndCluster(t *testing.T, f func(t *testing.T, c redis.UniversalClient, opts ...redisstore.Option)) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		f(t, redistest.Start(t).NewClient())
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c, prefix := redisstore.SharedCluster(t)
		f(t, c, redisstore.WithPrefix(prefix))
	})
}
