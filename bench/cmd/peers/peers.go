package main

import (
	"context"
	_ "embed"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
)

// setupRedisRate1: redis_rate's GCRA, one EVALSHA per decision, at the
// user level.
func setupRedisRate1(_ context.Context, e *env) (func() harness.Op, error) {
	return redisRate1(redis_rate.NewLimiter(e.NewClient()), e), nil
}

// setupRedisRate1AutoPipe: redis_rate over go-redis's AutoPipeliner
// (EXPERIMENTAL in go-redis), which sends concurrent commands in shared
// batches. It shows what batching concurrent decisions buys; the hook
// counts each command as its own round trip here, the writes column shows
// the batches.
func setupRedisRate1AutoPipe(_ context.Context, e *env) (func() harness.Op, error) {
	ap, err := e.NewClient().AutoPipeline()
	if err != nil {
		return nil, err
	}
	return redisRate1(redis_rate.NewLimiter(ap), e), nil
}

// redisRate1 decides with lim at the user level, one Allow per decision.
func redisRate1(lim *redis_rate.Limiter, e *env) func() harness.Op {
	keys := e.levelKeys()
	limit := redis_rate.Limit{Rate: levelRates[1], Burst: levelRates[1], Period: time.Second}
	return func() harness.Op {
		return func(ctx context.Context, k int) (bool, error) {
			r, err := lim.Allow(ctx, keys[k][1], limit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}
	}
}

// setupRedisRateNaive4: what a user of redis_rate writes for four levels:
// one Allow per level, in order, stopping at the first deny. It takes four
// round trips and is not all-or-nothing (levels before a deny stay charged).
func setupRedisRateNaive4(_ context.Context, e *env) (func() harness.Op, error) {
	lim := redis_rate.NewLimiter(e.NewClient())
	keys := e.levelKeys()
	var limits [4]redis_rate.Limit
	for i, r := range levelRates {
		limits[i] = redis_rate.Limit{Rate: r, Burst: r, Period: time.Second}
	}
	return func() harness.Op {
		return func(ctx context.Context, k int) (bool, error) {
			for i := range limits {
				r, err := lim.Allow(ctx, keys[k][i], limits[i])
				if err != nil {
					return false, err
				}
				if r.Allowed == 0 {
					return false, nil
				}
			}
			return true, nil
		}
	}, nil
}

// setupUlule: ulule/limiter's Redis store (fixed window, INCRBY+PEXPIRE in
// a script), one level.
func setupUlule(ctx context.Context, e *env) (func() harness.Op, error) {
	store, err := ulredis.NewStoreWithOptions(e.NewClient(), limiter.StoreOptions{Prefix: e.Prefix + "ulule"})
	if err != nil {
		return nil, err
	}
	lim := limiter.New(store, limiter.Rate{Period: time.Second, Limit: int64(levelRates[1])})
	keys := e.levelKeys()
	return func() harness.Op {
		return func(ctx context.Context, k int) (bool, error) {
			c, err := lim.Get(ctx, keys[k][1])
			if err != nil {
				return false, err
			}
			return !c.Reached, nil
		}
	}, nil
}

// lua4Script is the baseline of what one hand-written script costs: a
// token bucket per key in a hash, every key checked, all charged or none.
//
//go:embed lua4.lua
var lua4Script string

// setupLua4: the plain 4-key script, one EVALSHA per decision.
func setupLua4(ctx context.Context, e *env) (func() harness.Op, error) {
	c := e.NewClient()
	script := redis.NewScript(lua4Script)
	if err := script.Load(ctx, c).Err(); err != nil {
		return nil, err
	}
	keys := e.levelKeys()
	args := []any{1}
	for _, r := range levelRates {
		args = append(args, r, r)
	}
	return func() harness.Op {
		ks := make([]string, 4)
		return func(ctx context.Context, k int) (bool, error) {
			copy(ks, keys[k][:])
			v, err := script.EvalSha(ctx, c, ks, args...).Int64()
			if err != nil {
				return false, err
			}
			return v == 1, nil
		}
	}, nil
}
