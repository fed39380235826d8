package redistest

import (
	"fmt"
	"os/exec"
)

// ClusterProcess is a Redis Cluster for a program that is not a test (a
// benchmark's main), as Process is a standalone server: ClusterSize
// masters, and with StartClusterProcessWithReplicas a replica of each,
// whose nodes the program can kill, pause and resume as Processes. Its
// methods return errors instead of failing a test. Stop must be called.
type ClusterProcess struct{ c *Cluster }

// StartClusterProcess starts a cluster as StartCluster does (ClusterSize
// masters on free loopback ports, joined, every node reporting
// cluster_state:ok) and returns it, or why it could not start, with every
// node it started stopped.
func StartClusterProcess(opts ...Option) (*ClusterProcess, error) {
	return startClusterProcess(false, opts)
}

// StartClusterProcessWithReplicas starts a cluster with one replica per
// master as StartClusterWithReplicas does (cluster-node-timeout 2000 ms
// unless WithArgs overrides it), for a program that kills a master and
// watches its replica take over.
func StartClusterProcessWithReplicas(opts ...Option) (*ClusterProcess, error) {
	return startClusterProcess(true, opts)
}

func startClusterProcess(withReplicas bool, opts []Option) (*ClusterProcess, error) {
	c, err := startUnowned(withReplicas, opts)
	if err != nil {
		return nil, err
	}
	return &ClusterProcess{c: c}, nil
}

// startUnowned forms a cluster that belongs to no test (a ClusterProcess,
// a SharedCluster), or says why it could not, with every node it started
// stopped.
func startUnowned(withReplicas bool, opts []Option) (*Cluster, error) {
	cfg, err := clusterConfig(withReplicas, opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	for _, b := range []struct {
		name string
		path *string
	}{{"redis-server", &c.bin}, {"redis-cli", &c.cli}} {
		if *b.path, err = exec.LookPath(b.name); err != nil {
			return nil, fmt.Errorf("redistest: %s not found on PATH (%v); run `make deps` to install redis-server and redis-tools", b.name, err)
		}
	}
	if err := c.form(withReplicas); err != nil {
		c.stop()
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return c, nil
}

// Addrs returns the masters' addresses as started, "127.0.0.1:port" each:
// the seeds of a cluster client.
func (p *ClusterProcess) Addrs() []string { return p.c.Addrs() }

// Masters returns the masters as started, for fault injection: a
// failover swaps a master's role with its replica's, not their places.
func (p *ClusterProcess) Masters() []*Process { return processes(p.c.nodes) }

// Replicas returns the replicas (none without replicas): Replicas()[i]
// replicated Masters()[i] at start.
func (p *ClusterProcess) Replicas() []*Process { return processes(p.c.replicas) }

// WaitOK waits (bounded by three times the start timeout) until every
// running node reports cluster_state:ok with every slot assigned, for
// example after a replica's promotion.
func (p *ClusterProcess) WaitOK() error {
	return wrap(p.c.waitOK(3 * p.c.cfg.startTimeout))
}

// Stop kills and reaps every node and removes their directories. A
// second Stop does nothing.
func (p *ClusterProcess) Stop() { p.c.stop() }

func processes(ss []*Server) []*Process {
	out := make([]*Process, len(ss))
	for i, s := range ss {
		out[i] = &Process{s: s}
	}
	return out
}
