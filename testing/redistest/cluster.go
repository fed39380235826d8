package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterSize is the number of masters StartCluster starts.
const ClusterSize = 3

// Cluster is a Redis Cluster of ClusterSize masters and no replicas, owned
// by a test.
type Cluster struct {
	t     testing.TB
	cfg   config
	nodes []*Server

	mu      sync.Mutex
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
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	cli := lookBinary(t, "redis-cli")
	c := &Cluster{t: t, cfg: cfg}
	for i := 0; i < ClusterSize; i++ {
		s := newServer(t, cfg, true)
		if err := s.startFresh(); err != nil {
			t.Fatalf("redistest: cluster node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, s)
	}
	t.Cleanup(c.closeClients) // LIFO: clients close before the nodes die

	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 3*cfg.startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.waitOK(3 * cfg.startTimeout); err != nil {
		t.Fatalf("redistest: %v\nredis-cli output:\n%s", err, out)
	}
	return c
}

// waitOK waits until every node says cluster_state:ok and knows all 16384
// slots assigned, and a cluster client can route a command to each master.
func (c *Cluster) waitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok := true
		for i, n := range c.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := n.Client().ClusterInfo(ctx).Result()
			cancel()
			if err != nil {
				ok, last = false, fmt.Sprintf("node %d (%s): %v", i, n.Addr(), err)
				break
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") ||
				!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(c.nodes))) {
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

// WaitOK waits (bounded by the start timeout) until every running node
// reports cluster_state:ok again, for example after a node's Restart.
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

// Nodes returns the cluster's servers, for fault injection (Kill, Pause,
// Restart of one master) and for per-node commands.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
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

func (c *Cluster) closeClients() {
	c.mu.Lock()
	cls := c.clients
	c.clients = nil
	c.mu.Unlock()
	for _, cl := range cls {
		_ = cl.Close()
	}
}
