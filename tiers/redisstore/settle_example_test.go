package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// Settle adjusts what a take charged, in one script call: the same
// settlements as memstore's example, with the same results (the store
// takes its time from a fake clock here, as tests do; in production it
// reads Redis TIME).
func ExampleStore_Settle() {
	addr, stop := exampleRedis() // a throwaway redis-server for this example
	defer stop()
	client, err := redisstore.NewClient("redis://" + addr)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithClock(clock.New(time.Time{})), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	b := quota.Bucket{Key: "{tenant=acme}:tokens", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 100, Period: time.Second, Burst: 1000}, Cost: 500}
	res := make([]quota.Result, 1)
	ctx := context.Background()
	if _, err := store.Take(ctx, []quota.Bucket{b}, res); err != nil {
		fmt.Println(err)
		return
	}
	for _, delta := range []int64{800 - 500, -100, 700} {
		b.Cost = delta
		if err := store.Settle(ctx, []quota.Bucket{b}, res); err != nil {
			fmt.Println(err)
			return
		}
		b.Cost = 0 // a cost of 0 reads the bucket
		if _, err := store.Take(ctx, []quota.Bucket{b}, res); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("settled %+d: remaining %d\n", delta, res[0].Remaining)
	}
	b.Cost = 1
	if _, err := store.Take(ctx, []quota.Bucket{b}, res); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("next take: allowed", res[0].Allowed, "retry after", res[0].RetryAfter)
	// Output:
	// settled +300: remaining 200
	// settled -100: remaining 300
	// settled +700: remaining 0
	// next take: allowed false retry after 4.01s
}
