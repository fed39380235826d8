package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestGCRAFasterThanAMicrosecond: GCRA's tolerance adds a slack of at
// most half an emission interval to B·T, so at more than one unit a
// microsecond (10000/1ms here, T = 0.1 µs) a frozen clock admits exactly
// the burst, as the token bucket does; the fixed half microsecond was
// worth 5 units and admitted 14.
func TestGCRAFasterThanAMicrosecond(t *testing.T) {
	for _, alg := range []quota.Algorithm{quota.TokenBucket, quota.GCRA} {
		clk := clock.New(time.Unix(1_800_000_000, 0))
		s := newStore(t, memstore.WithClock(clk))
		l := quota.Limit{Algorithm: alg, Rate: 10_000, Period: time.Millisecond, Burst: 10}
		n := 0
		for i := 0; i < 100; i++ {
			var res [1]quota.Result
			ok, err := s.Take(context.Background(), []quota.Bucket{{Key: "k", Limit: l, Cost: 1}}, res[:])
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				n++
			}
		}
		if n > int(l.Burst) {
			t.Errorf("%s %d/%s burst %d: %d units admitted at one instant, more than the burst", alg, l.Rate, l.Period, l.Burst, n)
		}
	}
}
