package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/memstore"
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
	clk := clock.New(time.Time{})
	rs := fakeTimeStore(t, client, clk, redisstore.WithDenialCache(0))
	ms, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	prefix := fmt.Sprintf("sdiff%d:", seed)
	keys := []string{"{a}tb", "{b}gcra", "{c}swc", "{d}swl", "{e}fw"}
	ctx := context.Background()
	settled, waited, allowed, denied := 0, 0, 0, 0
	for step := 0; step < 600; step++ {
		clk.Advance(time.Duration(rng.IntN(120_000)) * time.Microsecond)
		var bs []quota.Bucket
		settle := rng.IntN(4) == 0
		// Half the takes charge only the two algorithms that can wait, so
		// that windows' denials leave waits something to decide.
		waitOnly := !settle && rng.IntN(2) == 0
		for i, k := range keys {
			if rng.IntN(3) == 0 || waitOnly && i >= 2 {
				continue
			}
			b := quota.Bucket{Key: prefix + k, Limit: redisstore.SmallLimits[i], Cost: int64(rng.IntN(4))}
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
			if err := ms.Settle(ctx, bs, nil); err != nil {
				t.Fatalf("memstore Settle: %v", err)
			}
			if err := rs.Settle(ctx, bs, nil); err != nil {
				t.Fatalf("step %d: redisstore Settle: %v", step, err)
			}
			settled++
			continue
		}
		want := make([]quota.Result, len(bs))
		got := make([]quota.Result, len(bs))
		wok, err := ms.Take(ctx, bs, want)
		if err != nil {
			t.Fatalf("memstore: %v", err)
		}
		gok, err := rs.Take(ctx, bs, got)
		if err != nil {
			t.Fatalf("step %d: redisstore: %v", step, err)
		}
		if gok != wok {
			t.Fatalf("step %d (t=%v): allowed %v, memstore %v", step, clk.Now().Sub(clock.Epoch), gok, wok)
		}
		for i := range bs {
			g, w := got[i], want[i]
			g.Source, w.Source = "", ""
			if g != w {
				t.Fatalf("step %d (t=%v) bucket %s cost %d max wait %v:\n got  %+v\n want %+v", step, clk.Now().Sub(clock.Epoch), bs[i].Key, bs[i].Cost, bs[i].MaxWait, g, w)
			}
			if w.Wait > 0 {
				waited++
			}
		}
		if wok {
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
	srv := redistest.Start(t)
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { differentialShaping(t, srv.Client(), seed) })
	}
}

// On a cluster the buckets sit in different slots: settlements go per
// slot, and denied takes with waiting buckets are refunded by refund.lua.
func TestDifferentialShapingCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { differentialShaping(t, cl.Client(), seed) })
	}
}
