package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/bench/internal/history"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// fleetTarget is the Redis of a run: the standalone server fleetacc
// starts, or (-cluster) a Redis Cluster of redistest.ClusterSize masters,
// with a replica each for failover runs.
type fleetTarget struct {
	where   string
	cluster bool
	// addrs is the standalone server's address, or the masters' (the
	// cluster clients' seeds).
	addrs []string
	// nodes are what a pause stops: the standalone server, or the
	// masters as started; replicas are the masters' replicas
	// (replicas[i] replicated nodes[i] at start), for failover runs.
	nodes, replicas []*redistest.Process
	proc            *redistest.Process // standalone: killed and restarted by -kill
	close           func()
}

// openTarget starts the Redis of the runs: a standalone server, or with
// -cluster a cluster without replicas (a failover run starts its own).
func openTarget(ctx context.Context, cfg config) (*fleetTarget, error) {
	if cfg.cluster {
		return openCluster(cfg, false)
	}
	t, err := harness.OpenRedis(ctx, "")
	if err != nil {
		return nil, err
	}
	return &fleetTarget{
		where: fmt.Sprintf("%s, pid %d", t.Where, t.Proc.Pid()),
		addrs: []string{t.Proc.Addr()}, nodes: []*redistest.Process{t.Proc}, proc: t.Proc, close: t.Close,
	}, nil
}

// openCluster starts a Redis Cluster (redistest.StartClusterProcess, or
// with replicas StartClusterProcessWithReplicas with -node-timeout).
func openCluster(cfg config, withReplicas bool) (*fleetTarget, error) {
	var cp *redistest.ClusterProcess
	var err error
	desc := fmt.Sprintf("Redis Cluster of %d masters", redistest.ClusterSize)
	if withReplicas {
		cp, err = redistest.StartClusterProcessWithReplicas(redistest.WithArgs("--cluster-node-timeout", strconv.FormatInt(cfg.nodeTimeout.Milliseconds(), 10)))
		desc += fmt.Sprintf(" with a replica each (cluster-node-timeout %s)", cfg.nodeTimeout)
	} else {
		cp, err = redistest.StartClusterProcess()
	}
	if err != nil {
		return nil, err
	}
	t := &fleetTarget{cluster: true, addrs: cp.Addrs(), nodes: cp.Masters(), replicas: cp.Replicas(), close: cp.Stop}
	c := nodeClient(t.addrs[0])
	version, err := harness.Info(context.Background(), c, "server", "redis_version")
	_ = c.Close()
	if err != nil {
		t.close()
		return nil, fmt.Errorf("asking cluster node %s for its version: %w", t.addrs[0], err)
	}
	t.where = fmt.Sprintf("%s, started %s: masters %s (--save \"\" --appendonly no)", version, desc, strings.Join(t.addrs, " "))
	return t, nil
}

// newClient returns a client of the target: a cluster client seeded with
// every master, or a standalone one. Options are the processes' (a dead
// server fails a call at once, the context's deadline is honoured).
func (t *fleetTarget) newClient() redis.UniversalClient {
	return newFleetClient(t.cluster, t.addrs, 8, 1)
}

// newFleetClient returns a cluster client seeded with addrs, or a client
// of addrs[0], honouring the context's deadline; pool and dialerRetries
// 0 are go-redis's defaults.
func newFleetClient(cluster bool, addrs []string, pool, dialerRetries int) redis.UniversalClient {
	if cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 addrs,
			PoolSize:              pool,
			ContextTimeoutEnabled: true,
			DialerRetries:         dialerRetries,
			MaxRedirects:          3,
		})
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0], PoolSize: pool, ContextTimeoutEnabled: true, DialerRetries: dialerRetries})
}

// nodeClient is a client of one node, for INFO.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

// redisCPU is the CPU time (user + system) every node running has used so
// far; an error when a node cannot say (a killed master).
func (t *fleetTarget) redisCPU(ctx context.Context) (time.Duration, error) {
	var total time.Duration
	for _, n := range append(append([]*redistest.Process(nil), t.nodes...), t.replicas...) {
		c := nodeClient(n.Addr())
		d, err := harness.RedisCPU(ctx, c)
		_ = c.Close()
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// failer kills, -kill-at into a failover run, the master holding
// principal 0's buckets (SIGKILL, never restarted) and waits until the
// cluster promotes its replica: a Cluster failover.
type failer struct {
	done chan struct{}
	err  error
	// killedAt, promotedAt (Unix ns): the kill, and when the replica
	// first said role:master.
	killedAt, promotedAt int64
	victim               string   // the dead master's address
	slots                [][2]int // the dead master's slot ranges
}

// startFailer finds the master of key's slot and kills it `at` later.
func startFailer(ctx context.Context, t *fleetTarget, key string, at time.Duration) (*failer, error) {
	admin := t.newClient().(*redis.ClusterClient)
	defer admin.Close()
	slot, err := admin.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER KEYSLOT %s: %w", key, err)
	}
	shards, err := admin.ClusterShards(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	f := &failer{done: make(chan struct{})}
	for _, sh := range shards {
		master := ""
		for _, n := range sh.Nodes {
			if n.Role == "master" {
				master = net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			}
		}
		mine := false
		for _, r := range sh.Slots {
			mine = mine || (r.Start <= slot && slot <= r.End)
		}
		if mine {
			f.victim = master
			for _, r := range sh.Slots {
				f.slots = append(f.slots, [2]int{int(r.Start), int(r.End)})
			}
		}
	}
	var victim, heir *redistest.Process
	for i, n := range t.nodes {
		if n.Addr() == f.victim && i < len(t.replicas) {
			victim, heir = n, t.replicas[i]
		}
	}
	if victim == nil {
		return nil, fmt.Errorf("slot %d of %s: its master %q is not a master started with a replica", slot, key, f.victim)
	}
	go func() {
		defer close(f.done)
		time.Sleep(at)
		f.killedAt = time.Now().UnixNano()
		if err := victim.Kill(); err != nil {
			f.err = err
			return
		}
		c := nodeClient(heir.Addr())
		defer c.Close()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if role, err := harness.Info(ctx, c, "replication", "role"); err == nil && role == "master" {
				f.promotedAt = time.Now().UnixNano()
				return
			}
		}
		f.err = fmt.Errorf("the replica %s of the killed master %s was not promoted within 30s", heir.Addr(), f.victim)
	}()
	return f, nil
}

// wait waits until the replica is promoted and returns what failed.
func (f *failer) wait() error {
	select {
	case <-f.done:
	case <-time.After(2 * time.Minute):
		return errors.New("no promotion within 2 minutes")
	}
	return f.err
}

// failoverDesc describes -failover for the header.
func failoverDesc(cfg config) string {
	if !cfg.failover {
		return "off"
	}
	return fmt.Sprintf("failover runs on a cluster with replicas (cluster-node-timeout %s): SIGKILL, %s into the run, of the master holding principal 0's buckets; its replica is promoted by the cluster; back on Redis within %s of the promotion promised",
		cfg.nodeTimeout, cfg.killAt, recoveryBound(cfg))
}

// failoverSlack is what a failover run may admit over a bucket's bound
// beyond what the dead master had not replicated: the fallback's bound
// for one period of length outage decided locally (localSlack's C + r·T),
// T from the kill until every process was back on Redis.
func failoverSlack(l level, outage time.Duration) float64 {
	return float64(l.burst) + float64(l.rate)*outage.Seconds()
}

// outage is how long a failover run's principals went without Redis: from
// the kill until the last process was back on it (its breaker closed).
func (r *row) outage() time.Duration {
	if r.killedAt == 0 || r.lastBack <= r.killedAt {
		return 0
	}
	return time.Duration(r.lastBack - r.killedAt)
}

// lost is what the promoted replica lacks of what the fleet admitted:
// admitted − Redis's count (-count), at least 0; ok is false without a
// count, or when local admits were not charged (-broken), which the
// count then lacks too.
func (r *row) lost() (n uint64, ok bool) {
	if !r.countKnown || r.uncharged {
		return 0, false
	}
	if r.admitted > r.counted {
		return r.admitted - r.counted, true
	}
	return 0, true
}

// failoverNote describes a failover run under the table.
func failoverNote(cfg config, r *row) string {
	lost := "n/a (run with -count)"
	if r.uncharged {
		lost = "n/a (local admits not charged: -broken)"
	}
	if n, ok := r.lost(); ok {
		lost = strconv.FormatUint(n, 10)
	}
	return fmt.Sprintf("master killed, its replica promoted %s after: %d decisions without Redis; every process back on Redis %s after the promotion (promised within %s), %s after the kill, the last decision without it %s after the promotion; units the promoted replica lacks %s; bound without them %.0f allowed",
		time.Duration(r.restartedAt-r.killedAt).Round(time.Millisecond), r.degraded, r.recovery().Round(time.Millisecond), recoveryBound(cfg),
		r.outage().Round(time.Millisecond), r.lastLocal().Round(time.Millisecond), lost, r.acc.Formula)
}

// failoverChecks are a failover run's targets: no request failed, over
// within the fallback's bound for the outage plus what the promoted
// replica lacks (what the dead master had not replicated), and every
// process back on Redis within recoveryBound of the promotion.
func failoverChecks(cfg config, r *row) ([]string, bool) {
	var checks []string
	eok := r.errors == 0
	checks = append(checks, fmt.Sprintf("no request failed (%d errors): %s", r.errors, metStr(eok)))
	lost, known := r.lost()
	ook := r.acc.FormulaExcess <= float64(lost)
	what := fmt.Sprintf("over within the fallback's bound for the %s outage (%.0f allowed)", r.outage().Round(time.Millisecond), r.acc.Formula)
	if known {
		what += fmt.Sprintf(" + %d units the promoted replica lacks", lost)
	}
	checks = append(checks, fmt.Sprintf("%s: %s", what, metStr(ook)))
	rok := r.restartedAt != 0 && r.recovery() <= recoveryBound(cfg)
	checks = append(checks, fmt.Sprintf("back on Redis %s after the promotion <= %s: %s", r.recovery().Round(time.Millisecond), recoveryBound(cfg), metStr(rok)))
	if r.countKnown {
		checks = append(checks, fmt.Sprintf("Redis's count %d, admitted %d", r.counted, r.admitted))
	}
	return checks, eok && ook && rok
}

// principalKey is the key of principal 0's first bucket in run s (its
// user bucket at one level): the failover kills the master of its slot.
func principalKey(cfg config, s spec, prefix string) (string, error) {
	ms, err := memstore.New()
	if err != nil {
		return "", err
	}
	ls := levelsFor(s.levels, cfg.rate, cfg.burst, cfg.keys)
	lim, err := tiers.NewLimiter(ms, policyFor(ls, cfg.alg, quota.Exact, cfg.sync, quota.FailClosed, false), tiers.WithKeyPrefix(prefix))
	if err != nil {
		return "", err
	}
	req := request(0)
	for _, b := range lim.Buckets(nil, &req) {
		if b.Rule == "user" {
			return b.Key, nil
		}
	}
	return "", errors.New("principal 0 has no user bucket")
}

// keysOnVictim returns the keys of h in the dead master's slots: the
// buckets whose writes the promoted replica may lack.
func (f *failer) keysOnVictim(ctx context.Context, t *fleetTarget, h history.History) ([]string, error) {
	admin := t.newClient()
	defer admin.Close()
	seen := map[string]bool{}
	var keys []string
	for _, o := range h.Ops {
		for _, b := range o.Buckets {
			if seen[b.Key] {
				continue
			}
			seen[b.Key] = true
			slot, err := admin.ClusterKeySlot(ctx, b.Key).Result()
			if err != nil {
				return nil, fmt.Errorf("CLUSTER KEYSLOT %s: %w", b.Key, err)
			}
			for _, r := range f.slots {
				if int64(r[0]) <= slot && slot <= int64(r[1]) {
					keys = append(keys, b.Key)
				}
			}
		}
	}
	return keys, nil
}
