package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// policy returns the bench's rate-limit policy, every rule in consistency
// mode (quota.Exact but for the local-first contenders). With 4 levels every
// call is charged to its tenant, user, API key (hashed into the key) and
// method+user; with 1 level only to its user. The rates are far above what
// one principal sees at c=64 over 10k principals drawn uniformly, so every
// call is admitted (with -dist zipf the hottest users can go over 1 000/s).
//
// With tenantSlot every rule's key starts with the tenant (the user,
// API-key and method+user levels keyed per tenant and user, and so on),
// and a key's first scope is its Redis Cluster hash tag: all levels of a
// call are in its tenant's slot, and a take is one script call on one
// master, at the price of a tenant's whole load on one master.
func policy(levels int, mode quota.Consistency, tenantSlot bool) *tiers.Policy {
	perSec := func(n int64) tiers.Rate { return tiers.Rate{N: n, Period: time.Second} }
	rules := []tiers.Rule{
		{Name: "user", Key: []tiers.Scope{tiers.ScopeUser}, Rate: perSec(1_000)},
		{Name: "tenant", Key: []tiers.Scope{tiers.ScopeTenant}, Rate: perSec(100_000)},
		{Name: "api-key", Key: []tiers.Scope{tiers.ScopeAPIKey}, Rate: perSec(1_000)},
		{Name: "method-user", Key: []tiers.Scope{tiers.ScopeUser, tiers.ScopeEndpoint}, Rate: perSec(1_000)},
	}
	if tenantSlot {
		for i := range rules {
			if rules[i].Key[0] != tiers.ScopeTenant {
				rules[i].Key = append([]tiers.Scope{tiers.ScopeTenant}, rules[i].Key...)
			}
		}
	}
	for i := range rules {
		rules[i].Consistency = mode
		// What the rows without a fallback store do anyway when Redis
		// fails (the default, local, needs fallback.New), said so that
		// building them logs no warning; Redis does not fail here.
		rules[i].OnStoreError = quota.FailOpen
	}
	return &tiers.Policy{Rules: rules[:levels]}
}

// chain builds the interceptors the way DESIGN.md shows users composing
// them: one UnaryServer per stage, in chain order (shedder, concurrency,
// tiers), each given the same identity options.
func chain(store quota.Store, levels int, prefix string) ([]grpc.ServerOption, error) {
	return chainMode(store, levels, quota.Exact, false, prefix)
}

// chainMode is chain with every rule in consistency mode, and with
// tenantSlot every level keyed first by the tenant (see policy).
func chainMode(store quota.Store, levels int, mode quota.Consistency, tenantSlot bool, prefix string) ([]grpc.ServerOption, error) {
	shed, err := shedder.New(10_000)
	if err != nil {
		return nil, fmt.Errorf("shedder: %w", err)
	}
	conc, err := concurrency.New(
		concurrency.WithGlobal(10_000),
		concurrency.WithPerKey(concurrency.PerKey{
			Name: "user-in-flight",
			Cap:  100,
			Key:  func(r *floodgate.Request) (string, bool) { return r.Identity.User, true },
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("concurrency: %w", err)
	}
	limits, err := tiers.NewLimiter(store, policy(levels, mode, tenantSlot), tiers.WithKeyPrefix(prefix))
	if err != nil {
		return nil, fmt.Errorf("tiers: %w", err)
	}
	opts := []interceptor.Option{
		interceptor.WithTenant(interceptor.FromHeader("x-tenant")),
		interceptor.WithUser(interceptor.FromHeader("x-user")),
		interceptor.WithAPIKey(interceptor.FromHeader("x-api-key")),
	}
	fg, err := interceptor.New(opts...)
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(fg.UnaryServer(shed), fg.UnaryServer(conc), fg.UnaryServer(limits))}, nil
}

func setupChainMem4(_ context.Context, e *env) ([]grpc.ServerOption, error) {
	store, err := memstore.New()
	if err != nil {
		return nil, err
	}
	return chain(store, 4, e.Prefix)
}

func setupChainRedis(levels int, batch bool) func(context.Context, *env) ([]grpc.ServerOption, error) {
	return setupChainRedisKeyed(levels, batch, false)
}

// setupChainRedisKeyed is setupChainRedis with, when tenantSlot, every
// level keyed first by the tenant (see policy).
func setupChainRedisKeyed(levels int, batch, tenantSlot bool) func(context.Context, *env) ([]grpc.ServerOption, error) {
	return func(_ context.Context, e *env) ([]grpc.ServerOption, error) {
		c, err := e.newRedisClient()
		if err != nil {
			return nil, err
		}
		// Batching is redisstore's default: the unbatched rows turn it off.
		opts := []redisstore.Option{redisstore.WithBatching(0, 0)}
		if batch {
			opts = []redisstore.Option{redisstore.WithBatching(e.batch[0], e.batch[1])}
		}
		store, err := redisstore.New(c, opts...)
		if err != nil {
			return nil, err
		}
		e.OnClose(func() { _ = store.Close() })
		return chainMode(store, levels, quota.Exact, tenantSlot, e.Prefix)
	}
}

// setupChainLocal is chain-redis-4-batch with every level in consistency
// mode (quota.Leased or quota.Async), decided by a localfirst.Store in
// front of the batched Redis store, which is both its exact store and its
// ledger (no fallback, as in the other chain-redis rows). The service is
// one process, so the store counts one live instance (the default).
func setupChainLocal(mode quota.Consistency) func(context.Context, *env) ([]grpc.ServerOption, error) {
	return func(_ context.Context, e *env) ([]grpc.ServerOption, error) {
		c, err := e.newRedisClient()
		if err != nil {
			return nil, err
		}
		store, err := redisstore.New(c, redisstore.WithBatching(e.batch[0], e.batch[1]))
		if err != nil {
			return nil, err
		}
		e.OnClose(func() { _ = store.Close() })
		// Every sync call may wait 5 s for Redis, not the default 250 ms,
		// which is too short on a loaded machine: Flush (the warm-up's
		// Settle) failed with an i/o timeout on a standalone server at
		// load 26, and on a cluster a report is one call per slot, every
		// principal's keys have slots of their own, so Close's final
		// reports are thousands of one-key calls. On a quiet machine no
		// call comes near either budget.
		lf, err := localfirst.New(store, store, localfirst.WithSyncTimeout(5*time.Second))
		if err != nil {
			return nil, err
		}
		// Registered last, so it runs first: what it still holds goes back
		// to Redis before the store stops.
		e.OnClose(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = lf.Close(ctx)
		})
		// Every hit of the measured calls is reported before Redis's CPU
		// is read: reports of keys far below their limits, deferred by
		// design, count in this row's Redis CPU, not in no row's.
		e.Probe.Drain = lf.Close
		// And the warm-up's hits are reported before the measured phase
		// starts, so they do not count against its calls (leases are
		// kept: the warm-up paid for them, the measured calls spend them).
		e.Probe.Settle = lf.Flush
		return chainMode(lf, 4, mode, false, e.Prefix)
	}
}

// setupShardsTenant is chain-redis-4-tenant over three standalone
// redis-servers (e.Cluster, from harness.OpenShards), a batched store
// each, every take sent whole to the server its hash tag picks (the
// tenant's: every level of a call carries it): what a cluster's one-slot
// takes cost Redis with the masters' count but no cluster, the control
// for cluster-redis-4-tenant.
func setupShardsTenant(_ context.Context, e *env) ([]grpc.ServerOption, error) {
	if len(e.Cluster) == 0 {
		return nil, fmt.Errorf("no shards configured for this contender")
	}
	var sh shardStore
	for _, addr := range e.Cluster {
		store, err := redisstore.New(e.NewClientAt(addr), redisstore.WithBatching(e.batch[0], e.batch[1]))
		if err != nil {
			return nil, err
		}
		e.OnClose(func() { _ = store.Close() })
		sh.stores = append(sh.stores, store)
	}
	return chainMode(sh, 4, quota.Exact, true, e.Prefix)
}

// shardStore sends each take to one of its stores, picked by the hash tag
// its buckets share (FNV-1a of the tag's text), as a service sharding its
// keys over standalone servers would; a take whose buckets do not share
// one is refused.
type shardStore struct{ stores []*redisstore.Store }

// Take implements quota.Store.
func (s shardStore) Take(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	if len(buckets) == 0 {
		return true, nil
	}
	tag := hashTag(buckets[0].Key)
	for i := 1; i < len(buckets); i++ {
		if t := hashTag(buckets[i].Key); t != tag {
			return false, fmt.Errorf("shardStore: a take across hash tags %q and %q", tag, t)
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tag))
	return s.stores[h.Sum32()%uint32(len(s.stores))].Take(ctx, buckets, res)
}

// hashTag returns what Redis Cluster hashes of key: the text between its
// first '{' and the next '}' when not empty, else the whole key.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}
