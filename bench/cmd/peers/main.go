// Command peers benchmarks floodgate's Redis store against peer rate
// limiting libraries on one redis-server, in one run, under one workload,
// and prints one table.
//
// Contenders (pick some with -only, comma separated):
//
//	floodgate-1          tiers/redisstore Take, 1 token-bucket level
//	floodgate-4          tiers/redisstore Take, 4 levels, all-or-nothing
//	floodgate-1-batch    floodgate-1 with redisstore.WithBatching (concurrent Takes share pipelines)
//	floodgate-4-batch    floodgate-4 with redisstore.WithBatching
//	redis_rate-1         github.com/go-redis/redis_rate/v10 Allow, 1 level (the baseline)
//	redis_rate-1-autopipe  the same over go-redis's experimental AutoPipeliner (batches
//	                     concurrent commands: the ceiling of client-side batching)
//	redis_rate-naive-4   four redis_rate Allow calls in a row, one per level
//	ulule-1              github.com/ulule/limiter/v3 with its Redis store, 1 level
//	lua-4                a plain 4-key token-bucket Lua script, one EVALSHA
//
// The workload is closed-loop: -c goroutines each keep one decision in
// flight on principals drawn uniformly (seeded) from -keys, for -duration or
// -max-ops per contender, after a warm-up. Limits are high, so nearly every
// decision is allowed and the table measures the decision path, not denials.
//
// What this program decides: that every contender is measured the same way
// against the same server in the same run, so the ratios in the last column
// compare like with like. By default it starts its own redis-server on a
// free 127.0.0.1 port (no persistence), flushes it between contenders and
// kills it at exit; -redis or REDIS_URL names a running server instead, which
// is then never flushed (keys carry a per-run prefix).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := run(ctx, os.Args, os.Stdout)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// baseline is the contender the ratio column compares with.
const baseline = "redis_rate-1"

type config struct {
	load                    harness.Load
	redis                   string
	pool                    int
	rounds                  int
	batchFlushers, batchMax int
	only                    []string
}

func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	var (
		cfg      config
		duration = fs.Duration("duration", 2*time.Second, "measured time per contender and round")
		warmup   = fs.Duration("warmup", 500*time.Millisecond, "warm-up per contender (scripts loaded, connections dialled, not measured)")
		c        = fs.Int("c", 64, "concurrent goroutines, one decision in flight each")
		keys     = fs.Int("keys", 10_000, "distinct principals, drawn uniformly at random")
		maxOps   = fs.Int64("max-ops", 5_000_000, "bound on decisions per contender (the phase ends at -duration or -max-ops)")
		seed     = fs.Uint64("seed", 1, "seed of the key streams")
		pool     = fs.Int("pool", 0, "go-redis connection pool size for every contender (0: equal to -c)")
		flushers = fs.Int("batch-flushers", 2, "floodgate-*-batch: pipelines in flight at once (redisstore.WithBatching)")
		batchMax = fs.Int("batch-max", 64, "floodgate-*-batch: most Takes per pipeline (redisstore.WithBatching)")
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
	if *pool < 0 || *pool > 10_000 {
		return cfg, fmt.Errorf("bad flags: pool %d is out of range [0, 10000]", *pool)
	}
	if *rounds < 1 || *rounds > 100 {
		return cfg, fmt.Errorf("bad flags: rounds %d is out of range [1, 100]", *rounds)
	}
	cfg.rounds = *rounds
	if *flushers < 1 || *flushers > 1024 || *batchMax < 1 || *batchMax > 100_000 {
		return cfg, fmt.Errorf("bad flags: batch-flushers %d / batch-max %d out of range [1, 1024] / [1, 100000]", *flushers, *batchMax)
	}
	cfg.batchFlushers, cfg.batchMax = *flushers, *batchMax
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

// env is what a contender's setup gets: a way to make counted clients of
// the server under test and the key layout of the run.
type env struct {
	opts                    *redis.Options
	pool                    int
	keys                    int
	batchFlushers, batchMax int
	prefix                  string
	clients                 []*redis.Client
	closers                 []func()
	probe                   harness.Probe
}

// newClient returns a client of the server under test with a round-trip
// counting hook; every contender gets the same client options.
func (e *env) newClient() *redis.Client {
	o := *e.opts
	o.PoolSize = e.pool
	o.MinIdleConns = 0
	cnt := &harness.Counter{}
	o.Dialer = cnt.Dial
	c := redis.NewClient(&o)
	c.AddHook(cnt)
	e.clients = append(e.clients, c)
	e.probe.Counters = append(e.probe.Counters, cnt)
	return c
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	for _, c := range e.clients {
		_ = c.Close()
	}
}

// levelKeys returns, for every principal k, the keys of its four levels:
// tenant (k/100), user (k), ip (k), and method+user (k), each under
// e.prefix. Built before the run so no key is formatted on the hot path.
func (e *env) levelKeys() [][4]string {
	out := make([][4]string, e.keys)
	for k := range out {
		ks := strconv.Itoa(k)
		out[k] = [4]string{
			e.prefix + "tenant:" + strconv.Itoa(k/100),
			e.prefix + "user:" + ks,
			e.prefix + "ip:" + ks,
			e.prefix + "method:/bench.v1.Svc/Get:user:" + ks,
		}
	}
	return out
}

// Limits of the four levels (tenant, user, ip, method+user): per second,
// burst equal to rate. At c=64 and 10k principals every level stays far
// from its limit, so decisions are allowed and the decision path is what
// is measured.
var levelRates = [4]int{100_000, 1_000, 1_000, 1_000}

// contender is one way of deciding; setup returns a factory of per-worker
// operations.
type contender struct {
	name  string
	setup func(ctx context.Context, e *env) (func() harness.Op, error)
}

var contenders = []contender{
	{"floodgate-1", setupFloodgate(1, false)},
	{"floodgate-4", setupFloodgate(4, false)},
	{"floodgate-1-batch", setupFloodgate(1, true)},
	{"floodgate-4-batch", setupFloodgate(4, true)},
	{"redis_rate-1", setupRedisRate1},
	{"redis_rate-1-autopipe", setupRedisRate1AutoPipe},
	{"redis_rate-naive-4", setupRedisRateNaive4},
	{"ulule-1", setupUlule},
	{"lua-4", setupLua4},
}

// measure sets one contender up, runs it and releases its clients.
func measure(ctx context.Context, cfg config, c contender, e *env) (harness.Stats, error) {
	defer e.close()
	newOp, err := c.setup(ctx, e)
	if err != nil {
		return harness.Stats{}, fmt.Errorf("setting up: %w", err)
	}
	for _, c := range e.clients {
		if err := harness.FillPool(ctx, c, e.pool); err != nil {
			return harness.Stats{}, err
		}
	}
	return harness.Run(ctx, cfg.load, newOp, e.probe)
}

func run(ctx context.Context, args []string, out io.Writer) ([]harness.Row, error) {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return nil, err
	}

	var (
		opts  *redis.Options
		owned bool
		where string
	)
	if cfg.redis != "" {
		if opts, err = harness.ParseRedisAddr(cfg.redis); err != nil {
			return nil, err
		}
		where = "given " + opts.Addr + " (not flushed)"
	} else {
		srv, err := harness.StartRedis(ctx, 10*time.Second)
		if err != nil {
			return nil, err
		}
		defer srv.Stop()
		opts, owned = &redis.Options{Addr: srv.Addr}, true
		where = "started " + srv.Addr + " (--save \"\" --appendonly no, flushed between contenders)"
	}
	admin := redis.NewClient(opts)
	defer admin.Close()
	version, err := harness.Info(ctx, admin, "server", "redis_version")
	if err != nil {
		return nil, fmt.Errorf("asking Redis at %s for its version: %w", opts.Addr, err)
	}

	harness.WriteHeader(out, args,
		[]string{
			"redis:   " + version + ", " + where,
			fmt.Sprintf("load:    c=%d keys=%d (uniform, seed %d) warmup=%s duration=%s max-ops=%d pool=%d batch=%d flushers x %d per contender and round, %d round(s)",
				cfg.load.Concurrency, cfg.load.Keys, cfg.load.Seed, cfg.load.Warmup, cfg.load.Duration, cfg.load.MaxOps, cfg.pool, cfg.batchFlushers, cfg.batchMax, cfg.rounds),
		},
		[]string{"github.com/redis/go-redis/v9", "github.com/go-redis/redis_rate/v10", "github.com/ulule/limiter/v3"})

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
			if owned {
				if err := admin.FlushAll(ctx).Err(); err != nil {
					return nil, fmt.Errorf("flushing Redis before %s: %w", c.name, err)
				}
			}
			st, err := measure(ctx, cfg, c, &env{
				opts: opts, pool: cfg.pool, keys: cfg.load.Keys,
				batchFlushers: cfg.batchFlushers, batchMax: cfg.batchMax,
				prefix: "fgbench:" + runID + ":" + strconv.Itoa(round) + ":" + c.name + ":",
				probe:  harness.Probe{Redis: admin},
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			fmt.Fprintf(out, "  round %d/%d  %-22s %8.0f decisions/s  p99 %s\n", round, cfg.rounds, c.name, st.PerSecond(), st.Latency.Quantile(0.99).Round(time.Microsecond))
			totals[i].Add(st)
		}
	}
	rows := make([]harness.Row, len(chosen))
	for i, c := range chosen {
		rows[i] = harness.Row{Name: c.name, Stats: totals[i]}
	}
	fmt.Fprintln(out)
	t := harness.Table{OpsUnit: "decisions", Baseline: baseline, Redis: true}
	if err := t.Write(out, rows); err != nil {
		return rows, err
	}
	if la, ok := harness.LoadAvg(); ok {
		fmt.Fprintf(out, "loadavg: %s at end\n", la)
	}
	return rows, nil
}
