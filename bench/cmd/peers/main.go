// Command peers benchmarks floodgate's Redis store against peer rate
// limiting libraries on one redis-server, in one run, under one workload,
// and prints one table.
//
// Contenders (pick some with -only, comma separated):
//
//	floodgate-1          tiers/redisstore Take, 1 token-bucket level
//	floodgate-4          tiers/redisstore Take, 4 levels, all-or-nothing
//	floodgate-1-batch    floodgate-1 with redisstore.WithBatching (concurrent Takes share one script call)
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
	"fmt"
	"io"
	"strconv"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
)

func main() { harness.Main("peers", run) }

// baseline is the contender the ratio column compares with.
const baseline = "redis_rate-1"

// help is the text of the common flags as this program words it.
var help = harness.Help{
	Warmup:      "warm-up per contender (scripts loaded, connections dialled, not measured)",
	Concurrency: "concurrent goroutines, one decision in flight each",
	Keys:        "distinct principals, drawn uniformly at random",
	MaxOps:      "bound on decisions per contender (the phase ends at -duration or -max-ops)",
	Pool:        "go-redis connection pool size for every contender (0: equal to -c)",
	Batching:    "floodgate-*-batch",
}

// env is what a contender's setup gets: a way to make counted clients of
// the server under test and the key layout of the run.
type env struct {
	harness.Env
	keys                    int
	batchFlushers, batchMax int
}

// levelKeys returns, for every principal k, the keys of its four levels:
// tenant (k/100), user (k), ip (k), and method+user (k), each under
// e.Prefix. Built before the run so no key is formatted on the hot path.
func (e *env) levelKeys() [][4]string {
	out := make([][4]string, e.keys)
	for k := range out {
		ks := strconv.Itoa(k)
		out[k] = [4]string{
			e.Prefix + "tenant:" + strconv.Itoa(k/100),
			e.Prefix + "user:" + ks,
			e.Prefix + "ip:" + ks,
			e.Prefix + "method:/bench.v1.Svc/Get:user:" + ks,
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
func measure(ctx context.Context, cfg harness.Config, c contender, e *env) (harness.Stats, error) {
	defer e.Close()
	newOp, err := c.setup(ctx, e)
	if err != nil {
		return harness.Stats{}, fmt.Errorf("setting up: %w", err)
	}
	if err := e.FillPools(ctx); err != nil {
		return harness.Stats{}, err
	}
	return harness.Run(ctx, cfg.Load, newOp, e.Probe)
}

func run(ctx context.Context, args []string, out io.Writer) ([]harness.Row, error) {
	cfg, err := harness.ParseFlags(args, out, help, harness.Names(contenders, func(c contender) string { return c.name }))
	if err != nil {
		return nil, err
	}

	target, err := harness.OpenRedis(ctx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	defer target.Close()

	harness.WriteHeader(out, args,
		[]string{
			"redis:   " + target.Where,
			fmt.Sprintf("load:    c=%d keys=%d (uniform, seed %d) warmup=%s duration=%s max-ops=%d pool=%d batch=%d flushers x %d per contender and round, %d round(s)",
				cfg.Load.Concurrency, cfg.Load.Keys, cfg.Load.Seed, cfg.Load.Warmup, cfg.Load.Duration, cfg.Load.MaxOps, cfg.Pool, cfg.BatchFlushers, cfg.BatchMax, cfg.Rounds),
		},
		[]string{"github.com/redis/go-redis/v9", "github.com/go-redis/redis_rate/v10", "github.com/ulule/limiter/v3"})

	var chosen []contender
	for _, c := range contenders {
		if cfg.Runs(c.name) {
			chosen = append(chosen, c)
		}
	}
	r := harness.Rounds{Rounds: cfg.Rounds, NameWidth: 22, Table: harness.Table{OpsUnit: "decisions", Baseline: baseline, Redis: true}}
	for _, c := range chosen {
		r.Names = append(r.Names, c.name)
	}
	return r.Run(ctx, out, func(ctx context.Context, round, i int, prefix string) (harness.Stats, error) {
		c := chosen[i]
		if target.Owned {
			if err := target.Admin.FlushAll(ctx).Err(); err != nil {
				return harness.Stats{}, fmt.Errorf("flushing Redis before %s: %w", c.name, err)
			}
		}
		st, err := measure(ctx, cfg, c, &env{
			Env:  harness.Env{Opts: target.Opts, Pool: cfg.Pool, Prefix: prefix, Probe: harness.Probe{Redis: target.Admin}},
			keys: cfg.Load.Keys, batchFlushers: cfg.BatchFlushers, batchMax: cfg.BatchMax,
		})
		if err != nil {
			return st, fmt.Errorf("%s: %w", c.name, err)
		}
		return st, nil
	})
}
