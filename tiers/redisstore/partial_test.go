package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// The denial cache and partial grants: a bucket denied a cost of 5 while
// it holds 3 still grants those 3 to a take of at most 10 (the cached
// denial is of 5 units, not of one); once it holds nothing, a partial
// grant's denial (not even one unit) is cached and answers the next
// partial take without Redis.
func TestDenialCachePartial(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, redistest.Start(t).Client(), clk, redisstore.WithDenialCache(100))
	b := quota.Bucket{Key: "cache-partial", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: time.Minute}, Cost: 5, CacheDenials: true}
	res := make([]quota.Result, 1)
	take := func(b quota.Bucket) bool {
		t.Helper()
		ok, err := st.Take(context.Background(), []quota.Bucket{b}, res)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	b.Cost = 4 // above the 3 the window holds, within its capacity
	if take(b) || res[0].Source == floodgate.SourceCache {
		t.Fatalf("cost 4: %+v, want denied by Redis", res[0])
	}
	b.Cost, b.AtMost = 10, true
	if !take(b) || res[0].Granted != 3 {
		t.Fatalf("at most 10 after a cached deny of 4: %+v, want 3 granted", res[0])
	}
	if take(b) || res[0].Source == floodgate.SourceCache {
		t.Fatalf("at most 10, none left: %+v, want denied by Redis", res[0])
	}
	if take(b) || res[0].Source != floodgate.SourceCache || res[0].Granted != 0 {
		t.Fatalf("again: %+v, want denied from the cache", res[0])
	}
}
