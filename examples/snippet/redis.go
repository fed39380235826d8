package main

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// docs/redis.md's "Redis client setup" section, compiled and tested
// (readme_test.go): the page holds the text between the markers verbatim.

// snippet-redis:start
// instances counts the live instances sharing the limits, for the
// fallback's local shares: pass (*fleet.Members).Count.
func newRedisLimiter(redisURL string, policy *tiers.Policy, instances func() int) (limits *tiers.Limiter, closeAll func(), err error) {
	// redis://host:6379, redis+sentinel://host:26379?master_name=m or
	// redis+cluster://host:7000?addr=host2:7000, with the timeouts and
	// retries the fallback needs.
	client, err := redisstore.NewClient(redisURL)
	if err != nil {
		return nil, nil, err
	}
	store, err := redisstore.New(client) // one EVALSHA per decision, batched
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	guarded, err := fallback.New(store, fallback.WithInstances(instances)) // breaker; local shares while Redis is down
	if err != nil {
		store.Close()
		client.Close()
		return nil, nil, err
	}
	closeAll = func() { // the fallback first: it hands Redis what it admitted while Redis was down
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		guarded.Close(ctx)
		store.Close()
		client.Close()
	}
	if limits, err = tiers.NewLimiter(guarded, policy); err != nil {
		closeAll()
		return nil, nil, err
	}
	return limits, closeAll, nil
}

// snippet-redis:end
