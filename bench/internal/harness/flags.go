package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Help holds the help texts of the common flags that differ between the
// bench programs; every other flag's help text is the same everywhere.
type Help struct {
	// Warmup, Concurrency, Keys, MaxOps and Pool are the help texts of
	// -warmup, -c, -keys, -max-ops and -pool.
	Warmup, Concurrency, Keys, MaxOps, Pool string
	// Batching names the contenders -batch-flushers and -batch-max apply
	// to, e.g. "floodgate-*-batch"; it starts their help texts.
	Batching string
}

// Config is the validated result of the common flags.
type Config struct {
	// Load is the workload of every contender.
	Load Load
	// Redis is the running Redis to use (-redis, else $REDIS_URL); empty
	// means start a private redis-server.
	Redis string
	// Pool is the go-redis pool size of every client (-pool, 0 becomes -c).
	Pool int
	// Rounds is how many times every contender runs, interleaved.
	Rounds int
	// BatchFlushers and BatchMax are the redisstore.WithBatching arguments.
	BatchFlushers, BatchMax int
	// Only lists the contenders to run; nil means all.
	Only []string
}

// Runs reports whether the contender called name is to run.
func (c Config) Runs(name string) bool {
	return c.Only == nil || slices.Contains(c.Only, name)
}

// Flags are the flags every bench program shares: the workload (-c, -keys,
// -duration, -warmup, -max-ops, -seed), -rounds, -short, -pool,
// -batch-flushers, -batch-max, -redis and -only.
type Flags struct {
	names                 []string
	duration, warmup      *time.Duration
	c, keys               *int
	maxOps                *int64
	seed                  *uint64
	pool, flushers, batch *int
	rounds                *int
	only, addr            *string
	short                 *bool
}

// RegisterFlags defines the common flags on fs with the given help texts;
// names are the contenders -only may name, in the program's order.
func RegisterFlags(fs *flag.FlagSet, h Help, names []string) *Flags {
	return &Flags{
		names:    names,
		duration: fs.Duration("duration", 2*time.Second, "measured time per contender and round"),
		warmup:   fs.Duration("warmup", 500*time.Millisecond, h.Warmup),
		c:        fs.Int("c", 64, h.Concurrency),
		keys:     fs.Int("keys", 10_000, h.Keys),
		maxOps:   fs.Int64("max-ops", 5_000_000, h.MaxOps),
		seed:     fs.Uint64("seed", 1, "seed of the key streams"),
		pool:     fs.Int("pool", 0, h.Pool),
		flushers: fs.Int("batch-flushers", 2, h.Batching+": pipelines in flight at once (redisstore.WithBatching)"),
		batch:    fs.Int("batch-max", 64, h.Batching+": most Takes per pipeline (redisstore.WithBatching)"),
		rounds:   fs.Int("rounds", 3, "run every contender this many times, interleaved, and report the totals (evens out background load)"),
		only:     fs.String("only", "", "comma-separated contenders to run (default all): "+strings.Join(names, ", ")),
		short:    fs.Bool("short", false, "smoke mode: one round of 1s per contender, 200ms warm-up (overrides -duration, -warmup and -rounds)"),
		addr:     fs.String("redis", "", "use this running Redis (host:port or redis:// URL) instead of starting one; default $REDIS_URL"),
	}
}

// Config validates the parsed flags (call it after fs.Parse) and returns
// them as a Config, or an error starting "bad flags: " that names the first
// flag out of range.
func (f *Flags) Config() (Config, error) {
	var cfg Config
	duration, warmup, rounds := *f.duration, *f.warmup, *f.rounds
	if *f.short {
		duration, warmup, rounds = time.Second, 200*time.Millisecond, 1
	}
	cfg.Load = Load{Concurrency: *f.c, Keys: *f.keys, Warmup: warmup, Duration: duration, MaxOps: *f.maxOps, Seed: *f.seed}
	if err := cfg.Load.Validate(); err != nil {
		return cfg, fmt.Errorf("bad flags: %w", err)
	}
	if *f.pool < 0 || *f.pool > 10_000 {
		return cfg, fmt.Errorf("bad flags: pool %d is out of range [0, 10000]", *f.pool)
	}
	if rounds < 1 || rounds > 100 {
		return cfg, fmt.Errorf("bad flags: rounds %d is out of range [1, 100]", rounds)
	}
	cfg.Rounds = rounds
	if *f.flushers < 1 || *f.flushers > 1024 || *f.batch < 1 || *f.batch > 100_000 {
		return cfg, fmt.Errorf("bad flags: batch-flushers %d / batch-max %d out of range [1, 1024] / [1, 100000]", *f.flushers, *f.batch)
	}
	cfg.BatchFlushers, cfg.BatchMax = *f.flushers, *f.batch
	cfg.Pool = *f.pool
	if cfg.Pool == 0 {
		cfg.Pool = *f.c
	}
	cfg.Redis = *f.addr
	if cfg.Redis == "" {
		cfg.Redis = os.Getenv("REDIS_URL")
	}
	if *f.only != "" {
		for _, n := range strings.Split(*f.only, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if !slices.Contains(f.names, n) {
				return cfg, fmt.Errorf("bad flags: unknown contender %q in -only (want some of %s)", n, strings.Join(f.names, ", "))
			}
			cfg.Only = append(cfg.Only, n)
		}
		if len(cfg.Only) == 0 {
			return cfg, errors.New("bad flags: -only names no contender")
		}
	}
	return cfg, nil
}

// Names returns name(c) for every contender c of a program, in order: the
// names ParseFlags takes.
func Names[C any](contenders []C, name func(C) string) []string {
	out := make([]string, len(contenders))
	for i, c := range contenders {
		out[i] = name(c)
	}
	return out
}

// ParseFlags parses a program's command line (args[0] is its name) with
// only the common flags, writing usage and parse errors to out, and returns
// the validated Config. Positional arguments are an error.
func ParseFlags(args []string, out io.Writer, h Help, names []string) (Config, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	f := RegisterFlags(fs, h, names)
	if err := fs.Parse(args[1:]); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return f.Config()
}

// Main runs a bench program: run gets os.Args, standard output and a
// context cancelled by SIGINT or SIGTERM. -h exits with status 2; any other
// error is printed to standard error after prog and exits with status 1.
func Main(prog string, run func(ctx context.Context, args []string, out io.Writer) ([]Row, error)) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	stopProfile, err := startProfile(os.Getenv("BENCH_CPUPROFILE"))
	if err == nil {
		_, err = run(ctx, os.Args, os.Stdout)
		stopProfile()
	}
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, prog+":", err)
		os.Exit(1)
	}
}

// startProfile writes a CPU profile of the whole run (every contender
// chosen, warm-ups included; pick one with -only) to path, when path is
// set (BENCH_CPUPROFILE), and returns what stops it.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("BENCH_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("BENCH_CPUPROFILE: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
