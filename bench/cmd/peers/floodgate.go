package main

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// setupFloodgate measures tiers/redisstore's Take directly (no policy, no
// interceptor): 1 level is the user bucket, 4 levels are tenant, user, ip
// and method+user, token bucket, charged all or nothing in one call.
//
// With batch set, the store sends concurrent Takes together
// (redisstore.WithBatching with -batch-flushers and -batch-max): one script
// call decides them in order, each Take still all or nothing.
func setupFloodgate(levels int, batch bool) func(context.Context, *env) (func() harness.Op, error) {
	return func(ctx context.Context, e *env) (func() harness.Op, error) {
		opts := []redisstore.Option{redisstore.WithBatching(0, 0)} // batching is redisstore's default
		if batch {
			opts[0] = redisstore.WithBatching(e.batchFlushers, e.batchMax)
		}
		store, err := redisstore.New(e.NewClient(), opts...)
		if err != nil {
			return nil, err
		}
		e.OnClose(func() { _ = store.Close() })
		keys := e.levelKeys()
		// Level 1 alone is the user bucket, like redis_rate-1 and ulule-1.
		order := [4]int{1, 0, 2, 3}
		table := make([][]quota.Bucket, len(keys))
		for k := range table {
			bs := make([]quota.Bucket, levels)
			for i := range bs {
				l := order[i]
				bs[i] = quota.Bucket{
					Key:   keys[k][l],
					Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: int64(levelRates[l]), Period: time.Second, Burst: int64(levelRates[l])},
					Cost:  1,
				}
			}
			table[k] = bs
		}
		return func() harness.Op {
			res := make([]quota.Result, levels)
			return func(ctx context.Context, k int) (bool, error) {
				return store.Take(ctx, table[k], res)
			}
		}, nil
	}
}
