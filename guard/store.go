package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/internal/storestack"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
)

// stores is what newStore made: the store the limiter decides with, and
// with Redis the client and the fleet's membership.
type stores struct {
	store   quota.Store
	client  redis.UniversalClient
	members *fleet.Members
}

// newStore builds the store stack (see the package doc; package
// internal/storestack decides it) and registers its close, which runs
// its parts in the order that loses no unit.
func (g *Guard) newStore(ctx context.Context, file *policyfile.File) (*stores, error) {
	st, err := storestack.New(ctx, storestack.Config{
		InProcess: g.c.inProcess,
		URL:       g.c.redisURL,
		Client:    g.c.client,
		Service:   g.c.service,
		KeyPrefix: g.c.keyPrefix,
		Timeout:   g.c.timeout,
		Logger:    g.c.logger,
		Observer:  g.observer,
		OnBreaker: g.c.onBreaker,
	})
	if urlErr := (*storestack.URLError)(nil); errors.As(err, &urlErr) {
		return nil, fmt.Errorf("guard: WithRedisURL: %w", urlErr.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	g.closers = append(g.closers, st.Close)
	g.fallback = st.Fallback
	g.storeDesc = st.Desc
	return &stores{store: st.Store, client: st.Client, members: st.Members}, nil
}

// fleetShedder builds the fleet-wide shedder of the policy's shedder:
// fleet: section, over the service's membership, running until Close.
func (g *Guard) fleetShedder(file *policyfile.File, st *stores) (*fleetshed.Shedder, error) {
	if st.members == nil {
		return nil, fmt.Errorf("guard: the policy's shedder: fleet: section needs Redis (WithRedisURL or WithRedisClient)")
	}
	fs, err := fleetshed.New(st.members, file.Fleet.Capacity)
	if err != nil {
		return nil, fmt.Errorf("guard: fleet shedder: %w", err)
	}
	if err := fs.Reconfigure(*file.Fleet); err != nil {
		return nil, fmt.Errorf("guard: policy shedder.fleet: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fs.Run(ctx, func(err error) { g.c.logger.Debug("floodgate: fleet shedder sync", "err", err) })
	}()
	g.closers = append(g.closers, func(context.Context) error { stop(); <-done; return nil })
	return fs, nil
}
