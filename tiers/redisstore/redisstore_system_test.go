//go:build system

package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestAggregateLive: the same fleet as TestAggregateFrozen, 8 pods x 16
// goroutines, on Redis TIME for 600 ms of wall-clock time: the total
// allowed never exceeds burst + rate x elapsed, and reaches the burst.
//
// Why it holds on a loaded 2-core machine: elapsed is read by the test
// after the last take ended and from before the first began, so it covers
// the Redis-time span of every admission however slowly the fleet runs;
// a busy machine makes fewer takes, never more admissions per second of
// Redis time. Each goroutine makes at least one take, even one that
// starts after the 600 ms: 128 takes, while the bucket, full at the start,
// admits its burst of 40 before it denies any.
func TestAggregateLive(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	limits := []quota.Limit{
		{Algorithm: quota.TokenBucket, Rate: 200, Period: time.Second, Burst: 40},
		{Algorithm: quota.GCRA, Rate: 200, Period: time.Second, Burst: 40},
	}
	for _, l := range limits {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			stores := storesN(t, 8, func() redis.UniversalClient { return srv.NewClient() }, nil)
			key := "live:" + l.Algorithm.String()
			const runFor = 600 * time.Millisecond
			start := time.Now()
			deadline := start.Add(runFor)
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for _, st := range stores {
				for g := 0; g < 16; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var res [1]quota.Result
						bs := []quota.Bucket{bucket(key, l, 1)}
						for i := 0; i < 100_000 && (i == 0 || time.Now().Before(deadline)); i++ {
							ok, err := st.Take(context.Background(), bs, res[:])
							if err != nil {
								t.Errorf("Take: %v", err)
								return
							}
							if ok {
								allowed.Add(1)
							}
						}
					}()
				}
			}
			wg.Wait()
			elapsed := time.Since(start)
			got := allowed.Load()
			bound := l.Burst + int64(float64(l.Rate)*elapsed.Seconds()/l.Period.Seconds())
			t.Logf("allowed %d in %s (bound burst + rate*elapsed = %d)", got, elapsed, bound)
			if got > bound {
				t.Fatalf("allowed %d > burst + rate*elapsed = %d", got, bound)
			}
			if got < l.Burst {
				t.Fatalf("allowed %d < burst %d: the fleet did not even get the burst", got, l.Burst)
			}
		})
	}
}
