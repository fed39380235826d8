package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// Settle adjusts what a take charged: a tenant's token bucket (100 per
// second, burst 1000) charged an estimate of 500 is settled with the 800
// the request really cost, then refunded 100, then put 700 into debt,
// which the next take waits out.
func ExampleStore_Settle() {
	clk := clock.New(time.Time{})
	store, _ := memstore.New(memstore.WithClock(clk))
	b := quota.Bucket{Key: "tenant:acme", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 100, Period: time.Second, Burst: 1000}, Cost: 500}
	res := make([]quota.Result, 1)
	ctx := context.Background()
	store.Take(ctx, []quota.Bucket{b}, res)
	for _, delta := range []int64{800 - 500, -100, 700} {
		b.Cost = delta
		if err := store.Settle(ctx, []quota.Bucket{b}, res); err != nil {
			fmt.Println(err)
			return
		}
		b.Cost = 0 // a cost of 0 reads the bucket
		store.Take(ctx, []quota.Bucket{b}, res)
		fmt.Printf("settled %+d: remaining %d\n", delta, res[0].Remaining)
	}
	b.Cost = 1
	store.Take(ctx, []quota.Bucket{b}, res)
	fmt.Println("next take: allowed", res[0].Allowed, "retry after", res[0].RetryAfter)
	// Output:
	// settled +300: remaining 200
	// settled -100: remaining 300
	// settled +700: remaining 0
	// next take: allowed false retry after 4.01s
}
