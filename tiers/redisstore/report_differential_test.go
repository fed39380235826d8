package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// reportLimits are the buckets of differentialReports: the three window
// algorithms and a token bucket, 10 a second each.
var reportLimits = []quota.Limit{
	{Algorithm: quota.FixedWindow, Rate: 10, Period: time.Second},
	{Algorithm: quota.SlidingWindowCounter, Rate: 10, Period: time.Second},
	{Algorithm: quota.SlidingWindowLog, Rate: 10, Period: time.Second},
	{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10},
}

// differentialReports runs the same random trace of takes, report calls
// (random subsets of the buckets, units from -4 to 6, window units
// admitted from 2.2 windows before now to 0.1 after: the current window,
// the previous one, one that is over, and a reporter's clock ahead) and
// resolves of earlier calls against memstore and report.lua, and requires
// identical results at every step.
func differentialReports(t *testing.T, client redis.UniversalClient, seed uint64) {
	d := newDiffRig(t, client, "rdiff", seed, 7)
	clk, rng, ctx, ms, rs, prefix := d.clk, d.rng, d.ctx, d.ms, d.rs, d.prefix
	keys := []string{"{a}fw", "{b}swc", "{c}swl", "{d}tb"}
	type call struct {
		seq uint64
		bs  []quota.Bucket
	}
	var calls []call
	charged, expired := 0, 0
	for step := 0; step < 300; step++ {
		clk.Advance(time.Duration(rng.IntN(300_000)) * time.Microsecond)
		where := d.at(step)
		switch r := rng.IntN(10); {
		case r < 4: // a take
			i := rng.IntN(len(keys))
			d.take(step, []quota.Bucket{{Key: prefix + keys[i], Limit: reportLimits[i], Cost: int64(rng.IntN(4))}})
		case r < 9 || len(calls) == 0: // a report
			var bs []quota.Bucket
			for i, k := range keys {
				if rng.IntN(3) == 0 {
					continue
				}
				b := quota.Bucket{Key: prefix + k, Limit: reportLimits[i], Cost: int64(rng.IntN(11)) - 4}
				if !b.Limit.Algorithm.CanBookAhead() {
					b.Admitted = clk.Now().Add(time.Duration(rng.IntN(2_300_000)-2_200_000) * time.Microsecond)
				}
				bs = append(bs, b)
			}
			seq := uint64(step + 1)
			want, got := make([]quota.ReportResult, len(bs)), make([]quota.ReportResult, len(bs))
			if err := ms.Report(ctx, 1, seq, bs, want); err != nil {
				t.Fatalf("%s: memstore: %v", where, err)
			}
			if err := rs.Report(ctx, 1, seq, bs, got); err != nil {
				t.Fatalf("%s: redisstore: %v", where, err)
			}
			for i := range bs {
				if got[i] != want[i] {
					t.Fatalf("%s: report to %s of %d admitted at %v:\n got  %+v\n want %+v", where, bs[i].Key, bs[i].Cost, bs[i].Admitted.Sub(clock.Epoch), got[i], want[i])
				}
				if !bs[i].Limit.Algorithm.CanBookAhead() && bs[i].Cost > 0 {
					if want[i].Charged == 0 {
						expired++
					} else {
						charged++
					}
				}
			}
			calls = append(calls, call{seq, bs})
		default: // resolve an earlier call
			c := calls[rng.IntN(len(calls))]
			want, got := make([]quota.ReportResult, len(c.bs)), make([]quota.ReportResult, len(c.bs))
			if err := ms.Resolve(ctx, 1, c.seq, c.bs, want); err != nil {
				t.Fatalf("%s: memstore: %v", where, err)
			}
			if err := rs.Resolve(ctx, 1, c.seq, c.bs, got); err != nil {
				t.Fatalf("%s: redisstore: %v", where, err)
			}
			for i := range c.bs {
				if got[i] != want[i] {
					t.Fatalf("%s: resolve of call %d, %s:\n got  %+v\n want %+v", where, c.seq, c.bs[i].Key, got[i], want[i])
				}
			}
		}
	}
	t.Logf("%d window reports charged, %d into windows that were over", charged, expired)
	if charged < 20 || expired < 10 {
		t.Fatalf("trace too one-sided to prove much: %d window reports charged, %d into windows that were over", charged, expired)
	}
}

func TestDifferentialReportsStandalone(t *testing.T) {
	t.Parallel()
	seeds(t, redistest.Start(t).Client(), 3, differentialReports)
}

// TestDifferentialReportsCluster: differentialReports on the shared
// cluster (its keys are its own: the rig's prefix).
func TestDifferentialReportsCluster(t *testing.T) {
	t.Parallel()
	seeds(t, sharedClient(t), 1, differentialReports)
}
