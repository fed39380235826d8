package guard

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// handOver bounds how long Close gives the fallback to hand what it
// admitted locally over to Redis, and the local-first store to report.
const handOver = 2 * time.Second

// stores is what newStore made: the store the limiter decides with, and
// with Redis the client and the fleet's membership.
type stores struct {
	store   quota.Store
	client  redis.UniversalClient
	members *fleet.Members
}

// newStore builds the store stack (see the package doc) and registers
// each part's close, in the order Close must run them reversed.
func (g *Guard) newStore(ctx context.Context, file *policyfile.File) (*stores, error) {
	if g.c.inProcess {
		mem, err := memstore.New()
		if err != nil {
			return nil, fmt.Errorf("guard: memory store: %w", err)
		}
		g.storeDesc = "in process"
		one := func() int { return 1 }
		lf, err := g.localFirst(g.observer.Store(mem), mem, one)
		if err != nil {
			return nil, err
		}
		return &stores{store: lf}, nil
	}
	// go-redis's own lines (failed dials, many a second while Redis is
	// down) go to the logger at debug level: the breaker's state changes
	// and the fallback's warnings say what matters once.
	redisstore.SetRedisLogger(g.c.logger, slog.LevelDebug)
	st := &stores{client: g.c.client}
	addr := "a caller's client"
	if st.client == nil {
		client, err := redisstore.NewClient(g.c.redisURL)
		if err != nil {
			return nil, fmt.Errorf("guard: WithRedisURL: %w", err)
		}
		st.client = client
		g.closers = append(g.closers, func(context.Context) error { return client.Close() })
		addr = redisstore.Redact(g.c.redisURL)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	unreachable := st.client.Ping(pingCtx).Err()
	cancel()
	if unreachable != nil {
		g.c.logger.Warn("floodgate: Redis does not answer yet; deciding locally until it does", "redis", addr, "err", unreachable)
	}
	rsOpts := []redisstore.Option{redisstore.WithBatching(2, 64)}
	if g.c.keyPrefix != "" {
		rsOpts = append(rsOpts, redisstore.WithPrefix(g.c.keyPrefix))
	}
	rs, err := redisstore.New(st.client, rsOpts...)
	if err != nil {
		return nil, fmt.Errorf("guard: Redis store: %w", err)
	}
	g.closers = append(g.closers, func(context.Context) error { return rs.Close() })
	if err := g.join(st); err != nil {
		return nil, err
	}
	guarded, err := fallback.New(g.observer.Store(rs),
		fallback.WithName("redis"),
		fallback.WithTimeout(g.c.timeout),
		fallback.WithInstances(st.members.Count),
		fallback.WithLogger(g.c.logger),
		fallback.WithOnStateChange(func(name string, from, to gobreaker.State) {
			g.observer.BreakerStateChanged(name, from.String(), to.String())
			if g.c.onBreaker != nil {
				g.c.onBreaker(name, from, to)
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("guard: fallback store: %w", err)
	}
	g.closers = append(g.closers, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, handOver)
		defer cancel()
		return guarded.Close(ctx)
	})
	g.fallback = guarded
	g.storeDesc = "Redis at " + addr + " (circuit breaker, local fallback shared by the live instances of " + g.c.service + ")"
	lf, err := g.localFirst(guarded, rs, st.members.Count)
	if err != nil {
		return nil, err
	}
	st.store = lf
	return st, nil
}

// join counts the live instances of the service by heartbeats in Redis
// (under WithKeyPrefix's prefix), until Close, which leaves the fleet.
func (g *Guard) join(st *stores) error {
	m, err := fleet.New(st.client, fleet.WithKey(g.c.keyPrefix+"fg:fleet:{"+g.c.service+"}"), fleet.WithLogger(g.c.logger))
	if err != nil {
		return fmt.Errorf("guard: fleet membership: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx) // returns ctx's error once it has left the fleet
	}()
	g.closers = append(g.closers, func(context.Context) error { stop(); <-done; return nil })
	st.members = m
	return nil
}

// localFirst puts the local-first store in front of exact, leasing from
// and reporting to ledger.
func (g *Guard) localFirst(exact quota.Store, ledger quota.Reporter, instances func() int) (quota.Store, error) {
	lf, err := localfirst.New(exact, ledger, localfirst.WithInstances(instances), localfirst.WithLogger(g.c.logger))
	if err != nil {
		return nil, fmt.Errorf("guard: local-first store: %w", err)
	}
	g.closers = append(g.closers, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, handOver)
		defer cancel()
		return lf.Close(ctx)
	})
	unregister, err := g.observer.ObserveLocalFirst(lf.Stats)
	if err != nil {
		return nil, fmt.Errorf("guard: local-first metrics: %w", err)
	}
	g.closers = append(g.closers, func(context.Context) error { unregister(); return nil })
	return lf, nil
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
