package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// ClusterProcess is a Redis Cluster of ClusterSize masters, no replicas,
// for a program that is not a test (a benchmark's main), started as
// StartCluster starts one. Stop must be called.
type ClusterProcess struct{ c *Cluster }

// StartClusterProcess starts a cluster as StartCluster does, for a
// program that is not a test: it returns the reason the cluster could not
// form instead of failing a test, and nothing is stopped until Stop.
func StartClusterProcess(opts ...Option) (*ClusterProcess, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server not found on PATH (%v); run `make deps` to install redis-server and redis-tools", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-cli not found on PATH (%v); run `make deps` to install redis-server and redis-tools", err)
	}
	p := &ClusterProcess{c: &Cluster{cfg: cfg}}
	for i := 0; i < ClusterSize; i++ {
		s := &Server{cfg: cfg, bin: bin, cluster: true}
		p.c.nodes = append(p.c.nodes, s)
		if err := s.startFresh(); err != nil {
			p.Stop()
			return nil, fmt.Errorf("redistest: cluster node %d: %w", i, err)
		}
	}
	args := append([]string{"--cluster", "create"}, p.c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 3*cfg.startTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := p.c.waitOK(3 * cfg.startTimeout); err != nil {
		p.Stop()
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return p, nil
}

// Addrs returns the masters' addresses, "127.0.0.1:port" each.
func (p *ClusterProcess) Addrs() []string { return p.c.Addrs() }

// Stop kills every node and removes its directory.
func (p *ClusterProcess) Stop() {
	for _, n := range p.c.nodes {
		n.cleanup()
	}
}
