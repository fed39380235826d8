// Command grpcload measures what floodgate's interceptor chain costs a real
// gRPC service: a unary Echo service on loopback, driven closed-loop with -c
// calls in flight over one client connection, with and without the chain.
//
// Contenders (pick some with -only, comma separated):
//
//	bare             no interceptors (the baseline)
//	chain-mem-4      shedder, concurrency and 4-level tiers on the in-process memstore
//	chain-redis-1    the same chain, tiers with 1 level on a real redis-server
//	chain-redis-4    the same chain, tiers with 4 levels on a real redis-server
//	chain-redis-1-batch  chain-redis-1 with redisstore.WithBatching
//	chain-redis-4-batch  chain-redis-4 with redisstore.WithBatching
//	chain-redis-4-leased chain-redis-4-batch with every level consistency leased,
//	                 decided by tiers/localfirst in front of the Redis store
//	chain-redis-4-async  the same with every level consistency async
//	chain-redis-4-tenant chain-redis-4-batch with every level's key starting
//	                 with the tenant, so one call's levels share a slot
//	redis_rate-1     yardstick: one github.com/go-redis/redis_rate/v10 Allow per
//	                 call in an interceptor (user level), on the same redis-server
//
// and, only when -only names them (make bench-cluster), the same on a
// 3-master Redis Cluster the run starts (testing/redistest), every
// contender's keys on all three masters (each identity its own hash tag):
//
//	cluster-redis-4-batch   chain-redis-4-batch on the cluster
//	cluster-redis-4-tenant  chain-redis-4-tenant on the cluster: one slot per call
//	cluster-redis-4-leased  chain-redis-4-leased on the cluster
//	cluster-redis-4-async   chain-redis-4-async on the cluster
//	cluster-redis-1-batch   chain-redis-1-batch on the cluster
//	cluster-redis_rate-1    redis_rate-1 on the cluster
//
// and the cluster's control, on three standalone servers the run starts
// (no cluster), each call's take sent to one of them by its hash tag:
//
//	shards-redis-4-tenant   chain-redis-4-tenant over the three servers
//
// Each call carries x-tenant, x-user and x-api-key metadata for a principal
// drawn (seeded) from -keys, uniformly or, with -dist zipf, Zipf-distributed
// (hot principals, and so a hot tenant); the interceptor reads identity from
// them. Limits are high, so every call is admitted and the table measures
// the admission path.
//
// What this program decides: every contender runs the same service, client
// and workload in the same process and run, so the ratio column compares
// like with like. Client and server share the process, so the CPU and
// allocation columns are per RPC for both ends together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/quota"
)

func main() { harness.Main("grpcload", run) }

const baseline = "bare"

// help is the text of the common flags as this program words it.
var help = harness.Help{
	Warmup:      "warm-up per contender (not measured)",
	Concurrency: "calls in flight",
	Keys:        "distinct principals (tenant = principal/100), drawn at random as -dist says",
	MaxOps:      "bound on calls per contender (the phase ends at -duration or -max-ops)",
	Pool:        "go-redis connection pool size of the Redis store (0: equal to -c)",
	Batching:    "chain-redis-*-batch, -leased and -async",
}

// The principal distributions of -dist.
const (
	distUniform = "uniform"
	distZipf    = "zipf"
	// zipfS is the exponent of -dist zipf: principal r (0 the hottest) is
	// drawn with probability proportional to 1/(r+1)^zipfS.
	zipfS = 1.1
	// zipfStream offsets the PCG streams of the zipf draws from the
	// harness's uniform ones.
	zipfStream = 1 << 32
)

// parseFlags parses the common flags and -dist.
func parseFlags(args []string, out io.Writer) (harness.Config, string, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	f := harness.RegisterFlags(fs, help, harness.Names(contenders, func(c contender) string { return c.name }))
	dist := fs.String("dist", distUniform, "how principals are drawn: uniform over -keys, or zipf (exponent 1.1: principal 0 hottest, and so tenant 0; hot keys)")
	if err := fs.Parse(args[1:]); err != nil {
		return harness.Config{}, "", err
	}
	if fs.NArg() > 0 {
		return harness.Config{}, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *dist != distUniform && *dist != distZipf {
		return harness.Config{}, "", fmt.Errorf("bad flags: -dist %q is not uniform or zipf", *dist)
	}
	cfg, err := f.Config()
	if err == nil && *dist == distZipf && cfg.Load.Keys < 2 {
		err = errors.New("bad flags: -dist zipf needs -keys >= 2")
	}
	return cfg, *dist, err
}

// env is what a contender's setup gets; Opts is nil when no chosen
// contender needs Redis.
type env struct {
	harness.Env
	batch   []int // flushers, max of redisstore.WithBatching
	cluster bool  // the contender runs on the cluster
}

// place is where a contender's Redis is.
type place uint8

const (
	standalone place = iota // the run's one redis-server
	onCluster               // the run's 3-master cluster
	onShards                // the run's three standalone servers, sharded by the contender
)

// newRedisClient returns a client of the Redis under test (the cluster,
// for a cluster contender) that counts its round trips (hook) and socket
// writes (dialer).
func (e *env) newRedisClient() (redis.UniversalClient, error) {
	if e.cluster {
		return e.NewClusterClient(), nil
	}
	if e.Opts == nil {
		return nil, errors.New("no Redis configured for this contender")
	}
	return e.NewClient(), nil
}

// contender returns the server options (interceptors) of one setup.
type contender struct {
	name  string
	redis bool
	setup func(ctx context.Context, e *env) ([]grpc.ServerOption, error)
	place place // off the standalone Redis, it runs only when -only names it
}

var contenders = []contender{
	{"bare", false, func(context.Context, *env) ([]grpc.ServerOption, error) { return nil, nil }, standalone},
	{"chain-mem-4", false, setupChainMem4, standalone},
	{"chain-redis-1", true, setupChainRedis(1, false), standalone},
	{"chain-redis-4", true, setupChainRedis(4, false), standalone},
	{"chain-redis-1-batch", true, setupChainRedis(1, true), standalone},
	{"chain-redis-4-batch", true, setupChainRedis(4, true), standalone},
	{"chain-redis-4-tenant", true, setupChainRedisKeyed(4, true, true), standalone},
	{"chain-redis-4-leased", true, setupChainLocal(quota.Leased), standalone},
	{"chain-redis-4-async", true, setupChainLocal(quota.Async), standalone},
	{"redis_rate-1", true, setupRedisRate1, standalone},
	{"cluster-redis-4-batch", true, setupChainRedis(4, true), onCluster},
	{"cluster-redis-4-tenant", true, setupChainRedisKeyed(4, true, true), onCluster},
	{"cluster-redis-4-leased", true, setupChainLocal(quota.Leased), onCluster},
	{"cluster-redis-4-async", true, setupChainLocal(quota.Async), onCluster},
	{"cluster-redis-1-batch", true, setupChainRedis(1, true), onCluster},
	{"cluster-redis_rate-1", true, setupRedisRate1, onCluster},
	{"shards-redis-4-tenant", true, setupShardsTenant, onShards},
}

// runs reports whether contender c is to run: as -only says, and a
// cluster contender only when -only names it.
func runs(cfg harness.Config, c contender) bool {
	return cfg.Runs(c.name) && (c.place == standalone || cfg.Only != nil)
}

// echo is the service: Plain answers with the request's message.
type echo struct {
	testpb.UnimplementedEchoServer
}

func (echo) Plain(_ context.Context, r *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Message: r.GetMessage()}, nil
}

func run(ctx context.Context, args []string, out io.Writer) ([]harness.Row, error) {
	cfg, dist, err := parseFlags(args, out)
	if err != nil {
		return nil, err
	}

	var (
		target     *harness.Target
		redisOpts  *redis.Options
		redisWhere = "not used by the chosen contenders"
	)
	needRedis, needCluster, needShards := false, false, false
	for _, c := range contenders {
		if !runs(cfg, c) {
			continue
		}
		needRedis = needRedis || (c.redis && c.place == standalone)
		needCluster = needCluster || c.place == onCluster
		needShards = needShards || c.place == onShards
	}
	var cluster, shards *harness.ClusterTarget
	var nodesWhere []string
	if needCluster {
		if cluster, err = harness.OpenCluster(ctx); err != nil {
			return nil, err
		}
		defer cluster.Close()
		nodesWhere = append(nodesWhere, "cluster: "+cluster.Where)
	}
	if needShards {
		if shards, err = harness.OpenShards(ctx); err != nil {
			return nil, err
		}
		defer shards.Close()
		nodesWhere = append(nodesWhere, "shards:  "+shards.Where)
	}
	if needRedis {
		if target, err = harness.OpenRedis(ctx, cfg.Redis); err != nil {
			return nil, err
		}
		defer target.Close()
		redisOpts, redisWhere = target.Opts, target.Where
	}
	lines := append([]string{"redis:   " + redisWhere}, nodesWhere...)
	lines = append(lines, fmt.Sprintf("load:    c=%d calls in flight on 1 connection, keys=%d (%s, seed %d) warmup=%s duration=%s max-ops=%d pool=%d batch=%d flushers x %d per contender and round, %d round(s)",
		cfg.Load.Concurrency, cfg.Load.Keys, dist, cfg.Load.Seed, cfg.Load.Warmup, cfg.Load.Duration, cfg.Load.MaxOps, cfg.Pool, cfg.BatchFlushers, cfg.BatchMax, cfg.Rounds))
	harness.WriteHeader(out, args, lines,
		[]string{"google.golang.org/grpc", "github.com/redis/go-redis/v9"})

	r := harness.Rounds{Rounds: cfg.Rounds, NameWidth: 22, Table: harness.Table{OpsUnit: "RPC", Baseline: baseline, Redis: needRedis || needCluster || needShards}}
	var chosen []contender
	for _, c := range contenders {
		if runs(cfg, c) {
			chosen, r.Names = append(chosen, c), append(r.Names, c.name)
		}
	}
	return r.Run(ctx, out, func(ctx context.Context, round, i int, prefix string) (harness.Stats, error) {
		c := chosen[i]
		nodes := map[place]*harness.ClusterTarget{onCluster: cluster, onShards: shards}[c.place]
		if nodes != nil {
			if err := nodes.FlushAll(ctx); err != nil {
				return harness.Stats{}, fmt.Errorf("flushing before %s: %w", c.name, err)
			}
		} else if c.redis && target.Owned {
			if err := target.Admin.FlushAll(ctx).Err(); err != nil {
				return harness.Stats{}, fmt.Errorf("flushing Redis before %s: %w", c.name, err)
			}
		}
		e := &env{Env: harness.Env{Opts: redisOpts, Pool: cfg.Pool, Prefix: prefix}, batch: []int{cfg.BatchFlushers, cfg.BatchMax}, cluster: c.place == onCluster}
		switch {
		case nodes != nil:
			e.Cluster, e.Probe.RedisNodes = nodes.Addrs, nodes.Nodes
		case c.redis:
			e.Probe.Redis = target.Admin
		}
		st, err := measure(ctx, cfg, dist, c, e)
		e.Close()
		if err != nil {
			return st, fmt.Errorf("%s: %w", c.name, err)
		}
		return st, nil
	})
}

// measure starts the service with the contender's interceptors on a free
// loopback port, dials it, runs the load and stops both.
func measure(ctx context.Context, cfg harness.Config, dist string, c contender, e *env) (harness.Stats, error) {
	opts, err := c.setup(ctx, e)
	if err != nil {
		return harness.Stats{}, fmt.Errorf("setting up: %w", err)
	}
	if err := e.FillPools(ctx); err != nil {
		return harness.Stats{}, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return harness.Stats{}, fmt.Errorf("listening on loopback: %w", err)
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterEchoServer(srv, echo{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-served
	}()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return harness.Stats{}, fmt.Errorf("dialling %s: %w", lis.Addr(), err)
	}
	defer conn.Close()
	client := testpb.NewEchoClient(conn)

	// The metadata of every principal is built before the run; a call only
	// attaches it to the phase's context (bounded by the harness).
	mds := make([]metadata.MD, cfg.Load.Keys)
	for k := range mds {
		ks := strconv.Itoa(k)
		mds[k] = metadata.Pairs(
			"x-tenant", "t"+strconv.Itoa(k/100),
			"x-user", "u"+ks,
			"x-api-key", "key-"+ks,
		)
	}
	req := &testpb.EchoRequest{Message: "hello"}
	ops := uint64(0) // Ops made so far: each zipf Op gets its own stream
	newOp := func() harness.Op {
		pick := func(k int) int { return k } // uniform: the harness's draw
		if dist == distZipf {
			ops++
			z := rand.NewZipf(rand.New(rand.NewPCG(cfg.Load.Seed, zipfStream+ops)), zipfS, 1, uint64(cfg.Load.Keys-1))
			pick = func(int) int { return int(z.Uint64()) }
		}
		return func(ctx context.Context, k int) (bool, error) {
			_, err := client.Plain(metadata.NewOutgoingContext(ctx, mds[pick(k)]), req)
			if err == nil {
				return true, nil
			}
			if s, ok := status.FromError(err); ok && (s.Code() == codes.ResourceExhausted || s.Code() == codes.Unavailable) {
				return false, nil
			}
			return false, err
		}
	}
	return harness.Run(ctx, cfg.Load, newOp, e.Probe)
}
