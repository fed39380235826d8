package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterSize is the number of masters StartCluster starts.
const ClusterSize = 3

// Cluster is a Redis Cluster of ClusterSize masters, with no replicas
// (StartCluster) or one replica each (StartClusterWithReplicas), owned by
// a test.
type Cluster struct {
	t        testing.TB // nil for StartClusterProcess
	cfg      config
	bin, cli string // redis-server and redis-cli
	nodes    []*Server
	replicas []*Server

	mu      sync.Mutex
	started []*Server // every node started, stopped by stop
	clients []*redis.ClusterClient
}

// StartCluster starts ClusterSize redis-server processes with
// cluster-enabled yes, each on a free loopback port whose bus port
// (port+10000) is free too, joins them with
// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, and
// waits until every node reports cluster_state:ok and agrees on the slot
// map. Everything is stopped at test cleanup. It fails the test if the
// cluster cannot form within the start timeout (default 10s per step).
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	return startCluster(t, false, opts)
}

// StartClusterWithReplicas starts a cluster as StartCluster does and then
// one more cluster node per master, made its replica (CLUSTER MEET, then
// CLUSTER REPLICATE), so that a test can kill a master and watch its
// replica take over. Every node runs with repl-diskless-sync-delay 0 (the
// first sync starts at once) and cluster-node-timeout 2000 ms, which
// WithArgs("--cluster-node-timeout", ...) overrides. It returns once every
// replica has finished its first sync with its master (link up, no sync in
// progress, the master counting it online), every node knows all
// 2*ClusterSize nodes, and every node reports cluster_state:ok.
// Replicas()[i] replicates Nodes()[i] at start; a failover swaps their
// roles, not their places in these slices.
func StartClusterWithReplicas(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	return startCluster(t, true, opts)
}

// StartClusterAsync begins to form a cluster as StartCluster does and
// returns at once, with the function that waits until the cluster is
// ready and returns it, failing the test if it could not form. A parallel
// test calls it before t.Parallel() and waits after: the cluster then
// forms (about 2 s, mostly Redis's own delays) while the tests before it
// run, instead of keeping one of go test's -parallel slots idle. Its nodes
// are stopped at test cleanup, once it has formed or failed to.
func StartClusterAsync(t testing.TB, opts ...Option) (wait func() *Cluster) {
	t.Helper()
	cfg, err := clusterConfig(false, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, cfg: cfg, bin: lookBinary(t, "redis-server"), cli: lookBinary(t, "redis-cli")}
	done := make(chan struct{})
	var ferr error
	go func() {
		defer close(done)
		ferr = c.form(false)
	}()
	t.Cleanup(func() {
		<-done
		c.stop()
	})
	return func() *Cluster {
		t.Helper()
		<-done
		if ferr != nil {
			t.Fatalf("redistest: %v", ferr)
		}
		return c
	}
}

func startCluster(t testing.TB, withReplicas bool, opts []Option) *Cluster {
	t.Helper()
	cfg, err := clusterConfig(withReplicas, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, cfg: cfg, bin: lookBinary(t, "redis-server"), cli: lookBinary(t, "redis-cli")}
	t.Cleanup(c.stop)
	if err := c.form(withReplicas); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// clusterConfig is the configuration of a cluster's nodes: opts, after
// the defaults of a cluster with replicas.
func clusterConfig(withReplicas bool, opts []Option) (config, error) {
	if withReplicas {
		// Before the caller's arguments, so that WithArgs overrides it.
		opts = append([]Option{WithArgs("--repl-diskless-sync-delay", "0")}, opts...)
	}
	return newConfig(opts)
}

// newNode starts one cluster node (not yet part of the cluster); c.stop
// stops it.
func (c *Cluster) newNode() (*Server, error) {
	s := &Server{t: c.t, cfg: c.cfg, bin: c.bin, cluster: true}
	c.mu.Lock()
	c.started = append(c.started, s)
	c.mu.Unlock()
	return s, s.startFresh()
}

// form starts the masters, joins them with redis-cli and, withReplicas,
// adds a replica to each; it returns once the cluster is ok.
func (c *Cluster) form(withReplicas bool) error {
	for i := 0; i < ClusterSize; i++ {
		s, err := c.newNode()
		if err != nil {
			return fmt.Errorf("cluster node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 3*c.cfg.startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.waitOK(3 * c.cfg.startTimeout); err != nil {
		return fmt.Errorf("%v\nredis-cli output:\n%s", err, out)
	}
	if withReplicas {
		return c.addReplicas()
	}
	return nil
}

// addReplicas starts one node per master, introduces it to the cluster,
// makes it that master's replica and waits until every replica is in sync
// and the cluster is ok.
func (c *Cluster) addReplicas() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*c.cfg.startTimeout)
	defer cancel()
	ids := make([]string, len(c.nodes))
	for i, m := range c.nodes {
		id, err := m.Client().ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("cluster node %d (%s): CLUSTER MYID: %w", i, m.Addr(), err)
		}
		ids[i] = id
	}
	mhost, mport, _ := net.SplitHostPort(c.nodes[0].Addr())
	for i := range c.nodes {
		r, err := c.newNode()
		if err != nil {
			return fmt.Errorf("cluster replica %d: %w", i, err)
		}
		c.replicas = append(c.replicas, r)
		if err := r.Client().ClusterMeet(ctx, mhost, mport).Err(); err != nil {
			return fmt.Errorf("cluster replica %d (%s): CLUSTER MEET: %w", i, r.Addr(), err)
		}
	}
	// CLUSTER REPLICATE needs the replica to know its master, which it
	// learns by gossip after the MEET.
	for i, r := range c.replicas {
		var err error
		for ctx.Err() == nil {
			if err = r.Client().ClusterReplicate(ctx, ids[i]).Err(); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("cluster replica %d (%s): CLUSTER REPLICATE %s: %w", i, r.Addr(), ids[i], err)
		}
	}
	if err := c.waitSynced(3 * c.cfg.startTimeout); err != nil {
		return err
	}
	return c.waitOK(3 * c.cfg.startTimeout)
}

// waitSynced waits until every replica's link to its master is up with
// no sync in progress and every master counts its replica online.
func (c *Cluster) waitSynced(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		last = ""
		for i, r := range c.replicas {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ri, err := r.Client().Info(ctx, "replication").Result()
			var mi string
			if err == nil {
				mi, err = c.nodes[i].Client().Info(ctx, "replication").Result()
			}
			cancel()
			switch {
			case err != nil:
				last = fmt.Sprintf("replica %d (%s): %v", i, r.Addr(), err)
			case !strings.Contains(ri, "master_link_status:up") || !strings.Contains(ri, "master_sync_in_progress:0"):
				last = fmt.Sprintf("replica %d (%s) not in sync: %s", i, r.Addr(), strings.ReplaceAll(ri, "\r\n", " "))
			case !strings.Contains(mi, "connected_slaves:1") || !strings.Contains(mi, "state=online"):
				last = fmt.Sprintf("master %d (%s) has no online replica: %s", i, c.nodes[i].Addr(), strings.ReplaceAll(mi, "\r\n", " "))
			}
			if last != "" {
				break
			}
		}
		if last == "" {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("cluster replicas not in sync within %s: %s", timeout, last)
}

// waitOK waits until every running node says cluster_state:ok, knows all
// 16384 slots assigned and knows every node started (a killed one too).
func (c *Cluster) waitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	all := c.all()
	for time.Now().Before(deadline) {
		ok := true
		for i, n := range all {
			if !n.Running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := n.Client().ClusterInfo(ctx).Result()
			cancel()
			if err != nil {
				ok, last = false, fmt.Sprintf("node %d (%s): %v", i, n.Addr(), err)
				break
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") ||
				!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(all))) {
				ok, last = false, fmt.Sprintf("node %d (%s): %s", i, n.Addr(), strings.ReplaceAll(info, "\r\n", " "))
				break
			}
		}
		if ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("cluster not ok within %s: %s", timeout, last)
}

// WaitOK waits (bounded by three times the start timeout) until every
// running node reports cluster_state:ok again, for example after a node's
// Restart or a replica's promotion.
func (c *Cluster) WaitOK() {
	c.t.Helper()
	if err := c.waitOK(3 * c.cfg.startTimeout); err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
}

// Addrs returns the masters' addresses, "127.0.0.1:port" each.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Nodes returns the cluster's masters as started, for fault injection
// (Kill, Pause, Restart of one master) and for per-node commands.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Replicas returns the replicas StartClusterWithReplicas started (none
// for StartCluster): Replicas()[i] replicated Nodes()[i] at start.
func (c *Cluster) Replicas() []*Server {
	return append([]*Server(nil), c.replicas...)
}

// MasterOf returns the index, in Nodes and Replicas, of the master that
// serves slot (0 to 16383) as the cluster says now, asking each master in
// turn until one answers; the test fails when none serves it.
func (c *Cluster) MasterOf(slot int64) int {
	c.t.Helper()
	var errs []error
	for _, n := range c.nodes {
		shards, err := n.Client().ClusterShards(context.Background()).Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if slot < r.Start || slot > r.End {
					continue
				}
				for _, nd := range sh.Nodes {
					addr := net.JoinHostPort(nd.IP, strconv.FormatInt(nd.Port, 10))
					for i, m := range c.nodes {
						if nd.Role == "master" && m.Addr() == addr {
							return i
						}
					}
				}
			}
		}
		c.t.Fatalf("redistest: no master of this cluster serves slot %d", slot)
	}
	c.t.Fatalf("redistest: no master answered CLUSTER SHARDS: %v", errs)
	return -1
}

func (c *Cluster) all() []*Server {
	return append(append([]*Server(nil), c.nodes...), c.replicas...)
}

// Client returns a new go-redis cluster client seeded with every master's
// address, closed at test cleanup. Each call returns an independent client
// (its own connection pools), so tests can model several processes.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        c.Addrs(),
		DialTimeout:  c.cfg.dialTimeout,
		ReadTimeout:  c.cfg.ioTimeout,
		WriteTimeout: c.cfg.ioTimeout,
		MaxRedirects: 3,
		// Honour the context's deadline, as redisstore requires.
		ContextTimeoutEnabled: true,
	})
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl
}

// FlushAll deletes every key on every master.
func (c *Cluster) FlushAll() {
	c.t.Helper()
	for _, n := range c.nodes {
		n.FlushAll()
	}
}

// ScriptFlush empties every master's script cache.
func (c *Cluster) ScriptFlush() {
	c.t.Helper()
	for _, n := range c.nodes {
		n.ScriptFlush()
	}
}

// stop closes the clients, then kills and reaps every node started.
func (c *Cluster) stop() {
	c.mu.Lock()
	cls, nodes := c.clients, c.started
	c.clients, c.started = nil, nil
	c.mu.Unlock()
	for _, cl := range cls {
		_ = cl.Close()
	}
	for _, s := range nodes {
		s.cleanup()
	}
}
