package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// differentialShaping runs the same random trace against memstore and the
// Redis store, as differential does, with two more kinds of step:
// settlements of random signed amounts (debt and refunds, on every
// algorithm, several buckets at once) and takes whose token bucket and
// GCRA buckets may wait (MaxWait). Every take must give identical
// decisions, results and waits; the settlements' effect shows in the takes
// that follow.
func differentialShaping(t *testing.T, client redis.UniversalClient, seed uint64) {
	d := newDiffRig(t, client, "sdiff", seed, 7)
	clk, rng := d.clk, d.rng
	keys := []string{"{a}tb", "{b}gcra", "{c}swc", "{d}swl", "{e}fw"}
	settled, waited, allowed, denied := 0, 0, 0, 0
	lims := append([]quota.Limit(nil), redisstore.SmallLimits...)
	for step := 0; step < 600; step++ {
		clk.Advance(time.Duration(rng.IntN(120_000)) * time.Microsecond)
		changeLimits(rng, lims)
		var bs []quota.Bucket
		settle := rng.IntN(4) == 0
		// Half the takes charge only the two algorithms that can wait, so
		// that windows' denials leave waits something to decide.
		waitOnly := !settle && rng.IntN(2) == 0
		for i, k := range keys {
			if rng.IntN(3) == 0 || waitOnly && i >= 2 {
				continue
			}
			b := quota.Bucket{Key: d.prefix + k, Limit: lims[i], Cost: int64(rng.IntN(4))}
			switch {
			case settle:
				b.Cost = int64(rng.IntN(11)) - 5
			case i < 2 && rng.IntN(4) != 0: // token bucket, GCRA
				b.MaxWait = time.Duration(rng.IntN(1_000_000)) * time.Microsecond
			}
			bs = append(bs, b)
		}
		if len(bs) == 0 {
			continue
		}
		if settle {
			if err := d.ms.Settle(d.ctx, bs, nil); err != nil {
				t.Fatalf("%s: memstore Settle: %v", d.at(step), err)
			}
			if err := d.rs.Settle(d.ctx, bs, nil); err != nil {
				t.Fatalf("%s: redisstore Settle: %v", d.at(step), err)
			}
			settled++
			continue
		}
		ok, res := d.take(step, bs)
		for _, r := range res {
			if r.Wait > 0 {
				waited++
			}
		}
		if ok {
			allowed++
		} else {
			denied++
		}
	}
	if allowed < 20 || denied < 20 || settled < 40 || waited < 20 {
		t.Fatalf("trace too one-sided to prove much: %d allowed, %d denied, %d settlements, %d waits", allowed, denied, settled, waited)
	}
	t.Logf("%d allowed, %d denied, %d settlements, %d waits", allowed, denied, settled, waited)
}

func TestDifferentialShapingStandalone(t *testing.T) {
	t.Parallel()
	seeds(t, redistest.Start(t).Client(), 3, differentialShaping)
}

// On a cluster the buckets sit in different slots: settlements go per
// slot, and denied takes with waiting buckets are refunded by refund.lua.
// On the shared cluster (the trace's keys are its own: the rig's prefix).
func TestDifferentialShapingCluster(t *testing.T) {
	t.Parallel()
	seeds(t, sharedClient(t), 3, differentialShaping)
}
