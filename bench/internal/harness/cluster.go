package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// ClusterTarget is a set of Redis masters a run started, flushed between
// contenders: a Redis Cluster of redistest.ClusterSize masters, no
// replicas (OpenCluster), or as many standalone servers, over which a
// contender shards its keys itself (OpenShards): the cluster's control.
type ClusterTarget struct {
	// Addrs are the masters' addresses.
	Addrs []string
	// Nodes are uncounted admin clients, one per master, for flushing and
	// reading each node's CPU.
	Nodes []*redis.Client
	// Where describes the cluster for the header.
	Where string

	stop func()
}

// OpenCluster starts a private Redis Cluster (testing/redistest) and asks
// its nodes for their version.
func OpenCluster(ctx context.Context) (*ClusterTarget, error) {
	p, err := redistest.StartClusterProcess()
	if err != nil {
		return nil, err
	}
	t := &ClusterTarget{Addrs: p.Addrs(), stop: p.Stop}
	version, err := t.admin(ctx)
	if err != nil {
		return nil, err
	}
	t.Where = fmt.Sprintf("%s, started cluster of %d masters %s (flushed between contenders)", version, len(t.Addrs), strings.Join(t.Addrs, " "))
	return t, nil
}

// OpenShards starts redistest.ClusterSize standalone redis-servers
// (testing/redistest, loopback), as many as a cluster's masters, and asks
// the first for its version.
func OpenShards(ctx context.Context) (*ClusterTarget, error) {
	var procs []*redistest.Process
	stop := func() {
		for _, p := range procs {
			p.Stop()
		}
	}
	t := &ClusterTarget{stop: stop}
	for range redistest.ClusterSize {
		p, err := redistest.StartProcessHandle()
		if err != nil {
			stop()
			return nil, err
		}
		procs = append(procs, p)
		t.Addrs = append(t.Addrs, p.Addr())
	}
	version, err := t.admin(ctx)
	if err != nil {
		return nil, err
	}
	t.Where = fmt.Sprintf("%s, started %d standalone servers %s (flushed between contenders)", version, len(t.Addrs), strings.Join(t.Addrs, " "))
	return t, nil
}

// admin opens t.Nodes and returns the first node's version; on an error
// it closes t.
func (t *ClusterTarget) admin(ctx context.Context) (string, error) {
	for _, a := range t.Addrs {
		t.Nodes = append(t.Nodes, redis.NewClient(&redis.Options{Addr: a}))
	}
	version, err := Info(ctx, t.Nodes[0], "server", "redis_version")
	if err != nil {
		t.Close()
		return "", fmt.Errorf("asking node %s for its version: %w", t.Addrs[0], err)
	}
	return version, nil
}

// FlushAll empties every master.
func (t *ClusterTarget) FlushAll(ctx context.Context) error {
	for i, n := range t.Nodes {
		if err := n.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("flushing node %s: %w", t.Addrs[i], err)
		}
	}
	return nil
}

// Close closes the admin clients and stops the servers.
func (t *ClusterTarget) Close() {
	for _, n := range t.Nodes {
		_ = n.Close()
	}
	t.stop()
}

// NewClusterClient returns a client of the cluster at e.Cluster with pool
// size e.Pool per node and a Counter added to e.Probe (its hook counts one
// round trip per pipeline however many nodes it reaches; its socket writes
// count each node's). e.Cluster must be set.
func (e *Env) NewClusterClient() *redis.ClusterClient {
	cnt := &Counter{}
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 e.Cluster,
		PoolSize:              e.Pool,
		Dialer:                cnt.Dial,
		ContextTimeoutEnabled: true, // redisstore requires it; peers run on the same settings
	})
	c.AddHook(cnt)
	e.clusterClients = append(e.clusterClients, c)
	e.Probe.Counters = append(e.Probe.Counters, cnt)
	return c
}

// nodesCPU returns the CPU time of each node so far.
func nodesCPU(ctx context.Context, nodes []*redis.Client) ([]time.Duration, error) {
	out := make([]time.Duration, len(nodes))
	for i, n := range nodes {
		v, err := RedisCPU(ctx, n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
