package harness

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// Target is the Redis a run measures against: a given server (never
// flushed) or a private redis-server started for the run.
type Target struct {
	// Opts are the client options of the server.
	Opts *redis.Options
	// Admin is an uncounted client for flushing and probing.
	Admin *redis.Client
	// Owned is true when the run started the server, so it may flush it.
	Owned bool
	// Where describes the server for the header: its version, address and
	// whether it was started and is flushed.
	Where string
	// Proc is the server the run started, for fault injection (kill,
	// restart); nil for a given server.
	Proc *redistest.Process

	stop func() // stops the server the run started; nil for a given one
}

// OpenRedis connects to the Redis at addr (host:port or redis:// URL) or,
// when addr is empty, starts a private redis-server, and asks it for its
// version. Close releases both.
func OpenRedis(ctx context.Context, addr string) (*Target, error) {
	t := &Target{}
	var where string
	if addr != "" {
		opts, err := ParseRedisAddr(addr)
		if err != nil {
			return nil, err
		}
		t.Opts = opts
		where = "given " + opts.Addr + " (not flushed)"
	} else {
		p, err := redistest.StartProcessHandle()
		if err != nil {
			return nil, fmt.Errorf("%w; or pass -redis host:port (or set REDIS_URL) to use a running server", err)
		}
		srvAddr := p.Addr()
		t.stop, t.Opts, t.Owned, t.Proc = p.Stop, &redis.Options{Addr: srvAddr}, true, p
		where = "started " + srvAddr + " (--save \"\" --appendonly no, flushed between contenders)"
	}
	t.Admin = redis.NewClient(t.Opts)
	version, err := Info(ctx, t.Admin, "server", "redis_version")
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("asking Redis at %s for its version: %w", t.Opts.Addr, err)
	}
	t.Where = version + ", " + where
	return t, nil
}

// Close closes the admin client and stops the server if the run started it.
func (t *Target) Close() {
	_ = t.Admin.Close()
	if t.stop != nil {
		t.stop()
	}
}

// Env is what one contender's setup gets in one round: counted clients of
// the Redis under test, a key prefix unique to the run, round and
// contender, and the probe Run reads.
type Env struct {
	// Opts are the options of the Redis under test (nil if none is used).
	Opts *redis.Options
	// Pool is the pool size of every client NewClient returns.
	Pool int
	// Prefix starts every key the contender writes.
	Prefix string
	// Probe collects the counters of every client; set Probe.Redis to have
	// Run read the server's CPU.
	Probe Probe
	// Cluster are the masters of the Redis Cluster under test, for
	// NewClusterClient, or the standalone shards, for NewClientAt (nil if
	// none is used).
	Cluster []string

	clients        []*redis.Client
	clusterClients []*redis.ClusterClient
	closers        []func()
}

// NewClient returns a client of e.Opts with pool size e.Pool, no idle
// minimum, and a Counter (round trips, commands, socket writes) added to
// e.Probe. Opts must be set.
func (e *Env) NewClient() *redis.Client { return e.newClient(*e.Opts) }

// NewClientAt returns a client as NewClient does, of the server at addr
// (one of the standalone shards, e.Cluster, of a run's OpenShards).
func (e *Env) NewClientAt(addr string) *redis.Client {
	return e.newClient(redis.Options{Addr: addr})
}

// newClient is NewClient with o.
func (e *Env) newClient(o redis.Options) *redis.Client {
	o.PoolSize = e.Pool
	o.MinIdleConns = 0
	cnt := &Counter{}
	o.Dialer = cnt.Dial
	o.ContextTimeoutEnabled = true // redisstore requires it; peers run on the same settings
	c := redis.NewClient(&o)
	c.AddHook(cnt)
	e.clients = append(e.clients, c)
	e.Probe.Counters = append(e.Probe.Counters, cnt)
	return c
}

// OnClose registers f to run at Close, before the clients close; functions
// run in reverse order of registration.
func (e *Env) OnClose(f func()) { e.closers = append(e.closers, f) }

// FillPools dials every client's pool full so no connection is dialled
// while measuring.
func (e *Env) FillPools(ctx context.Context) error {
	for _, c := range e.clients {
		if err := FillPool(ctx, c, e.Pool); err != nil {
			return err
		}
	}
	for _, c := range e.clusterClients {
		if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return FillPool(ctx, n, e.Pool) }); err != nil {
			return err
		}
	}
	return nil
}

// Close runs the OnClose functions, then closes every client.
func (e *Env) Close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	for _, c := range e.clients {
		_ = c.Close()
	}
	for _, c := range e.clusterClients {
		_ = c.Close()
	}
}
