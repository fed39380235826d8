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
//	chain-redis-4-batch  chain-redis-4 with redisstore.WithBatching
//
// Each call carries x-tenant, x-user and x-api-key metadata for a principal
// drawn uniformly (seeded) from -keys; the interceptor reads identity from
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
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := run(ctx, os.Args, os.Stdout)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "grpcload:", err)
		os.Exit(1)
	}
}

const baseline = "bare"

type config struct {
	load   harness.Load
	redis  string
	rounds int
	pool   int
	only   []string

	batchFlushers, batchMax int
}

func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	var (
		cfg      config
		duration = fs.Duration("duration", 2*time.Second, "measured time per contender and round")
		warmup   = fs.Duration("warmup", 500*time.Millisecond, "warm-up per contender (not measured)")
		c        = fs.Int("c", 64, "calls in flight")
		keys     = fs.Int("keys", 10_000, "distinct principals (tenant = principal/100), drawn uniformly at random")
		maxOps   = fs.Int64("max-ops", 5_000_000, "bound on calls per contender (the phase ends at -duration or -max-ops)")
		seed     = fs.Uint64("seed", 1, "seed of the key streams")
		pool     = fs.Int("pool", 0, "go-redis connection pool size of the Redis store (0: equal to -c)")
		flushers = fs.Int("batch-flushers", 2, "chain-redis-4-batch: pipelines in flight at once (redisstore.WithBatching)")
		batchMax = fs.Int("batch-max", 64, "chain-redis-4-batch: most Takes per pipeline (redisstore.WithBatching)")
		rounds   = fs.Int("rounds", 3, "run every contender this many times, interleaved, and report the totals (evens out background load)")
		only     = fs.String("only", "", "comma-separated contenders to run (default all): "+strings.Join(names(), ", "))
		short    = fs.Bool("short", false, "smoke mode: one round of 1s per contender, 200ms warm-up (overrides -duration, -warmup and -rounds)")
		addr     = fs.String("redis", "", "use this running Redis (host:port or redis:// URL) instead of starting one; default $REDIS_URL")
	)
	if err := fs.Parse(args[1:]); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *short {
		*duration, *warmup, *rounds = time.Second, 200*time.Millisecond, 1
	}
	cfg.load = harness.Load{Concurrency: *c, Keys: *keys, Warmup: *warmup, Duration: *duration, MaxOps: *maxOps, Seed: *seed}
	if err := cfg.load.Validate(); err != nil {
		return cfg, fmt.Errorf("bad flags: %w", err)
	}
	if *rounds < 1 || *rounds > 100 {
		return cfg, fmt.Errorf("bad flags: rounds %d is out of range [1, 100]", *rounds)
	}
	cfg.rounds = *rounds
	if *flushers < 1 || *flushers > 1024 || *batchMax < 1 || *batchMax > 100_000 {
		return cfg, fmt.Errorf("bad flags: batch-flushers %d / batch-max %d out of range [1, 1024] / [1, 100000]", *flushers, *batchMax)
	}
	cfg.batchFlushers, cfg.batchMax = *flushers, *batchMax
	if *pool < 0 || *pool > 10_000 {
		return cfg, fmt.Errorf("bad flags: pool %d is out of range [0, 10000]", *pool)
	}
	cfg.pool = *pool
	if cfg.pool == 0 {
		cfg.pool = *c
	}
	cfg.redis = *addr
	if cfg.redis == "" {
		cfg.redis = os.Getenv("REDIS_URL")
	}
	if *only != "" {
		for _, n := range strings.Split(*only, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if !slices.Contains(names(), n) {
				return cfg, fmt.Errorf("bad flags: unknown contender %q in -only (want some of %s)", n, strings.Join(names(), ", "))
			}
			cfg.only = append(cfg.only, n)
		}
		if len(cfg.only) == 0 {
			return cfg, errors.New("bad flags: -only names no contender")
		}
	}
	return cfg, nil
}

func names() []string {
	out := make([]string, len(contenders))
	for i, c := range contenders {
		out[i] = c.name
	}
	return out
}

// env is what a contender's setup gets.
type env struct {
	// redisOpts are the options of the Redis under test; nil when no
	// chosen contender needs Redis.
	redisOpts *redis.Options
	pool      int
	batch     []int  // flushers, max of redisstore.WithBatching
	prefix    string // of every rate-limit key, unique per run, round and contender
	clients   []*redis.Client
	closers   []func()
	probe     harness.Probe
}

// newRedisClient returns a client of the Redis under test that counts its
// round trips (hook) and socket writes (dialer).
func (e *env) newRedisClient() (*redis.Client, error) {
	if e.redisOpts == nil {
		return nil, errors.New("no Redis configured for this contender")
	}
	oc := *e.redisOpts
	oc.PoolSize = e.pool
	cnt := &harness.Counter{}
	oc.Dialer = cnt.Dial
	c := redis.NewClient(&oc)
	c.AddHook(cnt)
	e.clients = append(e.clients, c)
	e.probe.Counters = append(e.probe.Counters, cnt)
	return c, nil
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	for _, c := range e.clients {
		_ = c.Close()
	}
}

// contender returns the server options (interceptors) of one setup.
type contender struct {
	name  string
	redis bool
	setup func(ctx context.Context, e *env) ([]grpc.ServerOption, error)
}

var contenders = []contender{
	{"bare", false, func(context.Context, *env) ([]grpc.ServerOption, error) { return nil, nil }},
	{"chain-mem-4", false, setupChainMem4},
	{"chain-redis-1", true, setupChainRedis(1, false)},
	{"chain-redis-4", true, setupChainRedis(4, false)},
	{"chain-redis-4-batch", true, setupChainRedis(4, true)},
}

// echo is the service: Plain answers with the request's message.
type echo struct {
	testpb.UnimplementedEchoServer
}

func (echo) Plain(_ context.Context, r *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Message: r.GetMessage()}, nil
}

func run(ctx context.Context, args []string, out io.Writer) ([]harness.Row, error) {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return nil, err
	}

	var (
		redisOpts  *redis.Options
		redisWhere string
		admin      *redis.Client
		owned      bool
	)
	needRedis := false
	for _, c := range contenders {
		if c.redis && (cfg.only == nil || slices.Contains(cfg.only, c.name)) {
			needRedis = true
		}
	}
	if needRedis {
		if cfg.redis != "" {
			if redisOpts, err = harness.ParseRedisAddr(cfg.redis); err != nil {
				return nil, err
			}
			redisWhere = "given " + redisOpts.Addr + " (not flushed)"
		} else {
			srv, err := harness.StartRedis(ctx, 10*time.Second)
			if err != nil {
				return nil, err
			}
			defer srv.Stop()
			redisOpts, owned = &redis.Options{Addr: srv.Addr}, true
			redisWhere = "started " + srv.Addr + " (--save \"\" --appendonly no, flushed between contenders)"
		}
		admin = redis.NewClient(redisOpts)
		defer admin.Close()
		v, err := harness.Info(ctx, admin, "server", "redis_version")
		if err != nil {
			return nil, fmt.Errorf("asking Redis at %s for its version: %w", redisOpts.Addr, err)
		}
		redisWhere = v + ", " + redisWhere
	} else {
		redisWhere = "not used by the chosen contenders"
	}
	harness.WriteHeader(out, args,
		[]string{
			"redis:   " + redisWhere,
			fmt.Sprintf("load:    c=%d calls in flight on 1 connection, keys=%d (uniform, seed %d) warmup=%s duration=%s max-ops=%d pool=%d batch=%d flushers x %d per contender and round, %d round(s)",
				cfg.load.Concurrency, cfg.load.Keys, cfg.load.Seed, cfg.load.Warmup, cfg.load.Duration, cfg.load.MaxOps, cfg.pool, cfg.batchFlushers, cfg.batchMax, cfg.rounds),
		},
		[]string{"google.golang.org/grpc", "github.com/redis/go-redis/v9"})

	runID := strconv.FormatInt(time.Now().UnixNano()%1_000_000_007, 36)
	var chosen []contender
	for _, c := range contenders {
		if cfg.only == nil || slices.Contains(cfg.only, c.name) {
			chosen = append(chosen, c)
		}
	}
	totals := make([]harness.Stats, len(chosen))
	for round := 1; round <= cfg.rounds; round++ {
		for i, c := range chosen {
			if c.redis && owned {
				if err := admin.FlushAll(ctx).Err(); err != nil {
					return nil, fmt.Errorf("flushing Redis before %s: %w", c.name, err)
				}
			}
			e := &env{redisOpts: redisOpts, pool: cfg.pool, batch: []int{cfg.batchFlushers, cfg.batchMax}, prefix: "fgbench:" + runID + ":" + strconv.Itoa(round) + ":" + c.name + ":"}
			if c.redis {
				e.probe.Redis = admin
			}
			st, err := measure(ctx, cfg, c, e)
			e.close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			fmt.Fprintf(out, "  round %d/%d  %-20s %8.0f RPC/s  p99 %s\n", round, cfg.rounds, c.name, st.PerSecond(), st.Latency.Quantile(0.99).Round(time.Microsecond))
			totals[i].Add(st)
		}
	}
	rows := make([]harness.Row, len(chosen))
	for i, c := range chosen {
		rows[i] = harness.Row{Name: c.name, Stats: totals[i]}
	}
	fmt.Fprintln(out)
	t := harness.Table{OpsUnit: "RPC", Baseline: baseline, Redis: needRedis}
	if err := t.Write(out, rows); err != nil {
		return rows, err
	}
	if la, ok := harness.LoadAvg(); ok {
		fmt.Fprintf(out, "loadavg: %s at end\n", la)
	}
	return rows, nil
}

// measure starts the service with the contender's interceptors on a free
// loopback port, dials it, runs the load and stops both.
func measure(ctx context.Context, cfg config, c contender, e *env) (harness.Stats, error) {
	opts, err := c.setup(ctx, e)
	if err != nil {
		return harness.Stats{}, fmt.Errorf("setting up: %w", err)
	}
	for _, c := range e.clients {
		if err := harness.FillPool(ctx, c, e.pool); err != nil {
			return harness.Stats{}, err
		}
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
	mds := make([]metadata.MD, cfg.load.Keys)
	for k := range mds {
		ks := strconv.Itoa(k)
		mds[k] = metadata.Pairs(
			"x-tenant", "t"+strconv.Itoa(k/100),
			"x-user", "u"+ks,
			"x-api-key", "key-"+ks,
		)
	}
	req := &testpb.EchoRequest{Message: "hello"}
	newOp := func() harness.Op {
		return func(ctx context.Context, k int) (bool, error) {
			_, err := client.Plain(metadata.NewOutgoingContext(ctx, mds[k]), req)
			if err == nil {
				return true, nil
			}
			if s, ok := status.FromError(err); ok && (s.Code() == codes.ResourceExhausted || s.Code() == codes.Unavailable) {
				return false, nil
			}
			return false, err
		}
	}
	return harness.Run(ctx, cfg.load, newOp, e.probe)
}
