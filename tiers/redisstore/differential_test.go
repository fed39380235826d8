package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// differential runs the same random trace of multi-bucket takes (random
// subsets of 5 buckets, one per algorithm, and a sixth, a fixed window
// over calendar spans of unequal lengths (quota.Bucket.Span); random costs
// 0..3 including costs above capacity; in about a third of the takes a
// partial grant (quota.Bucket.AtMost) of at most 0..6 on a random subset
// of the buckets; random time steps) against memstore and the Redis
// store, and requires identical decisions and results at every step. On a
// cluster the buckets sit in different slots, so every denied take
// exercises refund.lua for each algorithm, and a partial grant is decided
// in two steps (read, then charge). The limits switch now and then
// between SmallLimits and ChangedLimits (changeLimits), so both stores
// read states written under another rate, burst and window.
func differential(t *testing.T, client redis.UniversalClient, seed uint64) {
	d := newDiffRig(t, client, "diff", seed, 42)
	clk, rng := d.clk, d.rng
	keys := []string{"{a}tb", "{b}gcra", "{c}swc", "{d}swl", "{e}fw", "{f}cal"}
	allowed, denied, partial, changed := 0, 0, 0, 0
	lims := append([]quota.Limit(nil), redisstore.SmallLimits...)
	for step := 0; step < 400; step++ {
		clk.Advance(time.Duration(rng.IntN(120_000)) * time.Microsecond)
		changed += changeLimits(rng, lims)
		var bs []quota.Bucket
		most, atMost := int64(-1), false
		if rng.IntN(3) == 0 {
			most = int64(rng.IntN(7))
		}
		for i, k := range keys {
			if rng.IntN(3) == 0 {
				continue
			}
			cost := int64(rng.IntN(4))
			if rng.IntN(40) == 0 {
				cost = 50 // above every capacity
			}
			b := quota.Bucket{Key: d.prefix + k, Cost: cost}
			if i < len(lims) {
				b.Limit = lims[i]
			} else {
				b.Limit, b.Span = redisstore.SmallLimits[4], calendarSpan(clk.Now())
			}
			if most >= 0 && rng.IntN(2) == 0 {
				b.Cost, b.AtMost, atMost = most, true, true
			}
			bs = append(bs, b)
		}
		if len(bs) == 0 {
			continue
		}
		if atMost {
			partial++
		}
		if ok, _ := d.take(step, bs); ok {
			allowed++
		} else {
			denied++
		}
	}
	if allowed < 20 || denied < 20 || partial < 40 || changed < 40 {
		t.Fatalf("trace too one-sided to prove much: %d allowed, %d denied, %d partial grants, %d limit changes", allowed, denied, partial, changed)
	}
}

// changeLimits switches, with a chance of 1 in 10 each, every limit of
// lims between its SmallLimits and its ChangedLimits value, and returns
// how many it switched.
func changeLimits(rng interface{ IntN(int) int }, lims []quota.Limit) int {
	n := 0
	for i := range lims {
		if rng.IntN(10) != 0 {
			continue
		}
		if lims[i] == redisstore.SmallLimits[i] {
			lims[i] = redisstore.ChangedLimits[i]
		} else {
			lims[i] = redisstore.SmallLimits[i]
		}
		n++
	}
	return n
}

// calendarSpan is the calendar window holding now in a made-up calendar
// whose windows last 700, 500, 900 and 1300 ms in turn (a cycle of 3.4 s
// from the Unix epoch): windows of unequal length, as months are.
func calendarSpan(now time.Time) quota.Span {
	lens := [...]int64{700_000, 500_000, 900_000, 1_300_000}
	const cycle = 3_400_000
	t := now.UnixMicro()
	start := t - t%cycle
	for _, l := range lens {
		if t < start+l {
			return quota.Span{Start: time.UnixMicro(start), End: time.UnixMicro(start + l)}
		}
		start += l
	}
	panic("unreachable")
}

func TestDifferentialStandalone(t *testing.T) {
	t.Parallel()
	seeds(t, redistest.Start(t).Client(), 3, differential)
}

// TestDifferentialCluster: differential on a cluster of its own, whose
// script caches it empties.
func TestDifferentialCluster(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	cl := wait()
	c := cl.Client()
	seeds(t, c, 3, differential)
	// And once more after every node lost its script cache: the take and
	// refund scripts come back through EVAL.
	cl.ScriptFlush()
	t.Run("after_script_flush", func(t *testing.T) { differential(t, c, 4) })
}
