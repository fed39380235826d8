package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A two-level take: a tenant allowed 3 requests per minute (fixed window)
// and a user allowed 10 per second with a burst of 2 (token bucket). The
// user's burst runs out first; then the tenant's window does, and the
// denied take charges the user nothing.
func Example() {
	clk := clock.New(time.Time{}) // fake time; use memstore.New() for the system clock
	store, err := memstore.New(memstore.WithClock(clk), memstore.WithMaxKeys(100_000))
	if err != nil {
		fmt.Println(err)
		return
	}
	buckets := []quota.Bucket{
		{Key: "tenant:acme", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: time.Minute}, Cost: 1},
		{Key: "user:ada", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 2}, Cost: 1},
	}
	res := make([]quota.Result, len(buckets))
	for _, at := range []time.Duration{0, 0, 0, 100 * time.Millisecond, 200 * time.Millisecond} {
		clk.Set(clock.Epoch.Add(at))
		allowed, err := store.Take(context.Background(), buckets, res)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("t=%-5v allowed=%-5v tenant remaining=%d retry=%v, user remaining=%d retry=%v\n",
			at, allowed, res[0].Remaining, res[0].RetryAfter, res[1].Remaining, res[1].RetryAfter)
	}
	// Output:
	// t=0s    allowed=true  tenant remaining=2 retry=0s, user remaining=1 retry=0s
	// t=0s    allowed=true  tenant remaining=1 retry=0s, user remaining=0 retry=0s
	// t=0s    allowed=false tenant remaining=1 retry=0s, user remaining=0 retry=100ms
	// t=100ms allowed=true  tenant remaining=0 retry=0s, user remaining=0 retry=0s
	// t=200ms allowed=false tenant remaining=0 retry=59.8s, user remaining=1 retry=0s
}
