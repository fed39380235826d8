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

// Both stores give units back, as package tiers/localfirst needs.
var (
	_ interface {
		Refund(context.Context, []quota.Bucket) error
	} = (*redisstore.Store)(nil)
	_ interface {
		Refund(context.Context, []quota.Bucket) error
	} = (*memstore.Store)(nil)
)

var refundLimits = []quota.Limit{
	{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 20},
	{Algorithm: quota.TokenBucket, Rate: 3, Period: time.Second, Burst: 7},
	{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 20},
	{Algorithm: quota.GCRA, Rate: 3, Period: time.Second, Burst: 7},
}

// TestRefundUndoesTake: a Refund of what a Take charged leaves a bucket
// exactly as if the Take had not happened: the same Results, to the
// microsecond, for every probe after it, token bucket and GCRA, also when
// the refund comes later than the take; and memstore agrees at every step.
// On a cluster the refunded key and its twin sit in different slots.
func TestRefundUndoesTake(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { refundUndoesTake(t, redistest.Start(t).Client()) })
	t.Run("cluster", func(t *testing.T) { refundUndoesTake(t, redistest.StartCluster(t).Client()) })
}

func refundUndoesTake(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	for _, l := range refundLimits {
		for _, later := range []time.Duration{0, 70 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s_%d_per_s/refund_after_%s", l.Algorithm, l.Rate, later), func(t *testing.T) {
				clk := clock.New(time.Time{})
				rs := fakeTimeStore(t, c, clk)
				ms, err := memstore.New(memstore.WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				prefix := fmt.Sprintf("undo:%s:%d:%d:", l.Algorithm, l.Rate, later)
				undone, kept := prefix+"{u}", prefix+"{k}"
				type store interface {
					quota.Store
					Refund(context.Context, []quota.Bucket) error
				}
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
					if err := st.Refund(ctx, []quota.Bucket{bucket(undone, l, 4)}); err != nil {
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
						t.Fatalf("cost %d after %s: refunded bucket %+v, untouched bucket %+v", step.cost, step.after, got, want)
					}
				}
			})
		}
	}
}

// TestRefundRedisTime: on Redis TIME (no WithClock), a refund gives back
// what a take charged, and keeps the key's TTL. The rates are slow
// enough (1 per hour) that the refill while the test runs rounds away.
func TestRefundRedisTime(t *testing.T) {
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
		if err := st.Refund(ctx, []quota.Bucket{bucket(key, l, 3)}); err != nil {
			t.Fatal(err)
		}
		if after := c.PTTL(ctx, key).Val(); after <= 0 || after > ttl {
			t.Fatalf("%s: TTL %s before the refund, %s after: want it kept", alg, ttl, after)
		}
		if _, res := mustTake(t, st, []quota.Bucket{bucket(key, l, 0)}); res[0].Remaining != 9 {
			t.Fatalf("%s: after refunding 3 of 4: %+v, want 9 remaining", alg, res[0])
		}
		// More than was charged: capped at the burst.
		if err := st.Refund(ctx, []quota.Bucket{bucket(key, l, 50)}); err != nil {
			t.Fatal(err)
		}
		if _, res := mustTake(t, st, []quota.Bucket{bucket(key, l, 0)}); res[0].Remaining != 10 || res[0].Reset != 0 {
			t.Fatalf("%s: after refunding more than was charged: %+v, want 10 remaining, reset 0", alg, res[0])
		}
	}
	// Absent keys stay absent.
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 10}
	if err := st.Refund(ctx, []quota.Bucket{bucket("rt:absent", l, 3)}); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, "rt:absent").Val(); n != 0 {
		t.Fatal("a refund of an absent key created it")
	}
}

// TestRefundRoundTrips: a Refund is one EVALSHA on a standalone Redis
// whatever its number of buckets, none when every cost is 0; after SCRIPT
// FLUSH one EVALSHA answered NOSCRIPT and one EVAL. On a cluster it is one
// script call per slot.
func TestRefundRoundTrips(t *testing.T) {
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
	if err := st.Refund(ctx, four); err != nil {
		t.Fatal(err)
	}
	if got := cnt.take(); fmt.Sprint(got) != fmt.Sprint(map[string]int{"evalsha": 1}) {
		t.Fatalf("Refund of 4 buckets sent %v, want one evalsha", got)
	}
	if err := st.Refund(ctx, []quota.Bucket{bucket("{a}:1", l, 0)}); err != nil {
		t.Fatal(err)
	}
	if got := cnt.take(); len(got) != 0 {
		t.Fatalf("Refund of cost 0 sent %v, want nothing", got)
	}
	srv.ScriptFlush()
	if err := st.Refund(ctx, four); err != nil {
		t.Fatalf("Refund after SCRIPT FLUSH: %v", err)
	}
	if got := cnt.take(); got["evalsha"] != 1 || got["eval"] != 1 || len(got) != 2 {
		t.Fatalf("Refund after SCRIPT FLUSH sent %v, want one evalsha (NOSCRIPT) and one eval", got)
	}

	cl := redistest.StartCluster(t)
	cc := cl.Client()
	ccnt := newCounter()
	cc.AddHook(ccnt)
	cst, err := redisstore.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer cst.Close()
	mustTake(t, cst, four)
	ccnt.take()
	if err := cst.Refund(ctx, four); err != nil {
		t.Fatal(err)
	}
	if got := ccnt.take(); got["evalsha"] != 3 || len(got) != 1 {
		t.Fatalf("cluster Refund of 4 buckets in 3 slots sent %v, want 3 evalsha", got)
	}
	if _, res := mustTake(t, cst, []quota.Bucket{bucket("{a}:1", l, 0), bucket("{a}:3", l, 0)}); res[0].Remaining != 10 || res[1].Remaining != 10 {
		t.Fatalf("after the cluster refund: %+v, want both full", res)
	}
}

// TestRefundForgetsDenial: a refunded bucket's cached denial is dropped,
// so the next take asks Redis and is admitted by the refunded units.
func TestRefundForgetsDenial(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, srv.NewClient(), clk, redisstore.WithDenialCache(10))
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 2}
	b := quota.Bucket{Key: "fd", Limit: l, Cost: 2, CacheDenials: true}
	mustTake(t, st, []quota.Bucket{b})
	if ok, res := mustTake(t, st, []quota.Bucket{b}); ok || res[0].Source != floodgate.SourceStore {
		t.Fatalf("second take: %v %+v, want a store deny", ok, res[0])
	}
	if ok, res := mustTake(t, st, []quota.Bucket{b}); ok || res[0].Source != floodgate.SourceCache {
		t.Fatalf("third take: %v %+v, want a cached deny", ok, res[0])
	}
	if err := st.Refund(context.Background(), []quota.Bucket{b}); err != nil {
		t.Fatal(err)
	}
	if ok, res := mustTake(t, st, []quota.Bucket{b}); !ok || res[0].Source != floodgate.SourceStore {
		t.Fatalf("take after the refund: %v %+v, want allowed by the store", ok, res[0])
	}
}

// TestRefundAllocs: a Refund allocates no more than an unbatched Take of
// the same buckets (what the go-redis command needs), and nothing for
// buckets of cost 0, whose validation allocates nothing.
func TestRefundAllocs(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.NewClient(), redisstore.WithBatching(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 20}
	bs := []quota.Bucket{bucket("al:a", l, 1), bucket("al:b", l, 1), bucket("al:c", l, 1)}
	ctx := context.Background()
	zero := []quota.Bucket{bucket("al:a", l, 0)}
	if a := testing.AllocsPerRun(50, func() { _ = st.Refund(ctx, zero) }); a != 0 {
		t.Fatalf("a Refund of cost 0 allocates %.0f times, want 0", a)
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
	refund := least(func() {
		if err := st.Refund(ctx, bs); err != nil {
			t.Fatal(err)
		}
	})
	if refund > take {
		t.Fatalf("a Refund of 3 buckets allocates %.0f times, a Take of them %.0f", refund, take)
	}
}
