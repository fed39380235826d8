package redisstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A burst of 1e9 refilled at 1 per 366 days resets in about 1e9 years:
// Reset and RetryAfter saturate at the largest Duration, as memstore's do,
// instead of wrapping or failing the take (a TTL that long is capped too).
func TestHugeDurationsSaturate(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	rs := fakeTimeStore(t, srv.Client(), clk)
	ms, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, alg := range []quota.Algorithm{quota.TokenBucket, quota.GCRA} {
		l := quota.Limit{Algorithm: alg, Rate: 1, Period: quota.MaxPeriod, Burst: quota.MaxRate}
		bs := []quota.Bucket{{Key: "huge:" + alg.String(), Limit: l, Cost: quota.MaxRate}}
		for i, wantAllowed := range []bool{true, false} {
			var got, want [1]quota.Result
			if _, err := ms.Take(ctx, bs, want[:]); err != nil {
				t.Fatalf("memstore: %v", err)
			}
			if _, err := rs.Take(ctx, bs, got[:]); err != nil {
				t.Fatalf("%s take %d: %v", alg, i, err)
			}
			g := got[0]
			g.Source, want[0].Source = "", ""
			if g != want[0] || g.Allowed != wantAllowed || g.Reset != time.Duration(math.MaxInt64) {
				t.Fatalf("%s take %d: %+v, memstore %+v; want allowed=%v, Reset = max Duration", alg, i, g, want[0], wantAllowed)
			}
			if !wantAllowed && g.RetryAfter != time.Duration(math.MaxInt64) {
				t.Fatalf("%s take %d: RetryAfter %v, want max Duration", alg, i, g.RetryAfter)
			}
		}
	}
}
