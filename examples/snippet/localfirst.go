package main

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// docs/consistency.md's local-first wiring ("Where a decision is made"),
// compiled and run against a real redis-server by this package's tests: the
// page holds the text between the markers verbatim.

// snippet-localfirst:start
func newLocalFirstLimiter(ctx context.Context, client redis.UniversalClient, obs *otel.Observer, policy *tiers.Policy) (*tiers.Limiter, func(context.Context) error, error) {
	redisStore, err := redisstore.New(client)
	if err != nil {
		return nil, nil, err
	}
	members, err := fleet.New(client) // live instances, by heartbeats in Redis
	if err != nil {
		return nil, nil, err
	}
	go members.Run(ctx) // beats until ctx ends, then leaves the fleet
	guarded, err := fallback.New(obs.Store(redisStore), fallback.WithInstances(members.Count))
	if err != nil {
		return nil, nil, err
	}
	lf, err := localfirst.New(guarded, redisStore, localfirst.WithInstances(members.Count))
	if err != nil {
		return nil, nil, err
	}
	closeAll := func(ctx context.Context) error { // local-first first: it reports hits, returns leases
		return errors.Join(lf.Close(ctx), guarded.Close(ctx)) // then the fallback hands over local admits
	}
	limits, err := tiers.NewLimiter(lf, policy) // exact, leased, async, settle, max_wait
	if err != nil {
		closeAll(ctx)
		return nil, nil, err
	}
	return limits, closeAll, nil
}

// snippet-localfirst:end
