// Command fleetacc measures how exactly a fleet of separate processes, each
// with its own stores, keeps a shared rate limit in each consistency
// (exact, leased and async). It starts one redis-server on
// loopback, then runs its own binary -procs times (like pods), each process
// building the real stack (redisstore, fallback, localfirst, tiers.Limiter)
// and deciding limits.Admit with -g goroutines on a few principals that
// every process shares, at several times the limit, for -dur. With -pause,
// Redis is stopped (SIGSTOP) for -pause-for every -pause-every meanwhile,
// and continued (SIGCONT): latency spikes. With -kill, each mode × levels
// also gets a run where Redis is killed (SIGKILL) -kill-at into the run and
// restarted empty on the same port -kill later (an outage), which reports
// how long the processes took to decide on Redis again.
//
// Per run (mode × levels × healthy, paused or killed) it prints what the fleet
// admitted beside what a perfect global limiter could have admitted in the
// same window: for a token bucket that starts full, burst + rate × window
// per bucket, the window running from the first decision of any process to
// the last. See bench/README.md, "Fleet accuracy", for every column.
//
// -algorithm sets every rule's algorithm, the counting rule's too:
// token_bucket (the default), fixed_window or sliding_window_counter,
// whose rules count -rate units per 1 s window and have no burst (exact
// mode only: leased and async book units ahead, which a window cannot).
// A window algorithm's bound is its limit per window the decisions' span
// touches (for the sliding counter an upper bound, see boundsFor), and a
// note gives what a perfect limiter of it admits of each window's demand.
// -pause-start puts the first pause that far into the run (a slow period
// after the stores' first seconds), then one every -pause-every.
//
// What this program decides: whether a run met the consistency modes' targets. Exact
// and leased must never admit more than a bucket's bound (the exit status
// is 1 if either did in any run); async's targets (within n × rate × sync
// interval per bucket, at most 2% over) and leased's under-admission
// target (at most 5%) are printed, not enforced. A killed run must stay
// within the outage bound (see killSlack; enforced for rules that fail
// closed) and be back on Redis within
// the fallback's open interval plus one probe plus go-redis's one-second
// dial backoff (recoveryBound); either miss also exits 1. So does a paused
// run in which a breaker opened, or (rules on_store_error closed) any
// decision was made without Redis. A paused exact run with rules
// on_store_error local prints its own targets: over within the fallback's
// bound for one slow period (localSlack), under at most 5%, and, with
// -count, Redis's count of the units it was charged (a rule per principal
// that never binds, read after the processes have reported what they
// admitted locally) equal to what the fleet admitted.
//
// With -history, every process of an exact run also records each take its
// Redis store makes (package bench/internal/history; with the store's
// batching on, its default, each take is placed anywhere between its send
// and its answer; with -batch=false its Redis time is read from its own
// reply, which places it exactly), and the parent checks the merged history, with the restart of a killed
// run, for linearizability under the bucket model: it prints the takes
// checked, the verdict and the time the check took, and a counterexample
// when it fails, which fails the run. -broken breaks process 0's store on
// purpose (skip: some takes answer allowed without Redis; split: some
// takes charge their levels one at a time), to show the check failing.
//
// With -cluster the Redis is a Redis Cluster of three masters
// (testing/redistest), which every process reaches with a cluster client;
// a pause stops every master together (-pause-nodes all, a stalled host)
// or one master a pause in turn (rotate). With -failover each mode and
// level also gets a run on a cluster with a replica per master, in which
// the master holding principal 0's buckets is killed (SIGKILL) -kill-at
// into the run and the cluster promotes its replica: the run must fail no
// request, stay within the fallback's bound for the outage plus what the
// promoted replica lacks of what was admitted (Redis's count, -count),
// and be back on Redis within recoveryBound of the promotion.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/bench/internal/history"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		if err := childMain(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "fleetacc child:", err)
			os.Exit(1)
		}
		return
	}
	harness.Main("fleetacc", run)
}

// config is the validated command line.
type config struct {
	procs, g, keys       int
	dur                  time.Duration
	modes                []string
	levels               []int
	pauses               []bool
	pauseEvery, pauseFor time.Duration
	pauseStart           time.Duration // 0: the first pause one -pause-every in
	alg                  quota.Algorithm
	kill, killAt         time.Duration
	sync                 time.Duration
	rate, burst          int64
	offered              float64
	maxOps               int64
	instances            string
	onErr                string
	fbTimeout            time.Duration
	closedTimeout        time.Duration // 0: the fallback's default
	batch                bool
	count                bool
	seed                 uint64
	timeout              time.Duration
	history              bool
	broken               string
	// cluster runs on a Redis Cluster; pauseNodes says which masters a
	// pause stops; failover adds failover runs, on a cluster with
	// replicas whose cluster-node-timeout is nodeTimeout.
	cluster     bool
	pauseNodes  string
	failover    bool
	nodeTimeout time.Duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.procs, "procs", 8, "processes in the fleet (like pods), each with its own stores")
	fs.DurationVar(&c.dur, "dur", 5*time.Second, "how long every process decides, per run")
	modes := fs.String("modes", "exact,leased,async", "consistencies to run, comma separated")
	levels := fs.String("levels", "1,4", "policy levels to run, comma separated: 1 (user) and/or 4 (tenant, user, api_key, ip)")
	pause := fs.String("pause", "both", "Redis latency spikes: off, on, or both (a healthy and a paused run of each); none runs only the -kill or -failover runs")
	fs.DurationVar(&c.pauseEvery, "pause-every", 500*time.Millisecond, "with -pause: stop Redis this often")
	fs.DurationVar(&c.pauseFor, "pause-for", 30*time.Millisecond, "with -pause: for this long (SIGSTOP, then SIGCONT)")
	fs.DurationVar(&c.pauseStart, "pause-start", 0, "with -pause: the first pause begins this long into the run, then one every -pause-every (0: the first one -pause-every in)")
	alg := fs.String("algorithm", "token_bucket", "algorithm of every rule, the counting rule (-count) too: token_bucket, fixed_window or sliding_window_counter (a window algorithm's rules count -rate units per 1s window and have no burst)")
	fs.DurationVar(&c.kill, "kill", 0, "also run each mode and level with Redis killed (SIGKILL) for this long, then restarted empty on the same port (0: no killed runs)")
	fs.DurationVar(&c.killAt, "kill-at", time.Second, "with -kill: how far into the run Redis is killed")
	fs.DurationVar(&c.sync, "sync", 50*time.Millisecond, "sync_interval of the async rules")
	fs.IntVar(&c.g, "g", 4, "goroutines deciding in every process")
	fs.IntVar(&c.keys, "keys", 4, "principals every process shares (drawn uniformly)")
	fs.Int64Var(&c.rate, "rate", 200, "user rule: units per second per principal (the other levels derive from it)")
	fs.Int64Var(&c.burst, "burst", 50, "user rule: burst per principal")
	fs.Float64Var(&c.offered, "offered", 8000, "decisions per second the whole fleet offers, spread over its goroutines (0: each goroutine as fast as it can)")
	fs.Int64Var(&c.maxOps, "max-ops", 5_000_000, "bound on the decisions of one process per run")
	fs.StringVar(&c.instances, "instances", "fleet", "how processes count live instances: fleet (package fleet heartbeats in the run's Redis) or static (-procs)")
	fs.StringVar(&c.onErr, "on-store-error", "closed", "on_store_error of every rule: closed, local or open (local and open admit without Redis, so they can go over during pauses)")
	fs.DurationVar(&c.fbTimeout, "fallback-timeout", fallback.DefaultTimeout, "fallback.WithTimeout of every process (rules with on_store_error closed wait fallback.DefaultClosedTimeout, or this if longer)")
	fs.DurationVar(&c.closedTimeout, "closed-timeout", 0, "fallback.WithClosedTimeout of every process: how long a call of a rule with on_store_error closed, and the breaker's probe, wait for Redis (0: the fallback's default, fallback.DefaultClosedTimeout or -fallback-timeout if longer)")
	fs.BoolVar(&c.batch, "batch", true, "redisstore's client-side batching (its default); -batch=false sends every take alone (WithBatching(0, 0))")
	fs.BoolVar(&c.count, "count", false, "add a rule per principal that never binds (capacity 1e9) and, after each run but a killed one, read from Redis every unit charged to it: the ledger's count beside what the fleet admitted")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the principal streams")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "bound on the whole program")
	fs.BoolVar(&c.history, "history", false, "exact runs: every process records its takes and the merged history is checked for linearizability against the bucket model (bench/internal/history); with -batch=false each take's Redis time is read from its reply, which places it exactly")
	fs.StringVar(&c.broken, "broken", "off", "with -history, to show the checker catches it: off, skip (every 7th take of process 0 answers allowed without Redis) or split (every 7th take of process 0 charges its levels one at a time, not all or nothing)")
	fs.BoolVar(&c.cluster, "cluster", false, "run on a Redis Cluster of 3 masters (testing/redistest) instead of one redis-server; every process uses a cluster client")
	fs.StringVar(&c.pauseNodes, "pause-nodes", "all", "with -cluster and -pause: all (every master stopped together, as a stalled host would) or rotate (one master a pause, in turn)")
	fs.BoolVar(&c.failover, "failover", false, "with -cluster: also run each mode and level on a cluster with a replica per master, with the master of principal 0's buckets killed (SIGKILL) -kill-at into the run; the cluster promotes its replica")
	fs.DurationVar(&c.nodeTimeout, "node-timeout", time.Second, "with -failover: cluster-node-timeout of the cluster with replicas (failure detection; the promotion follows about a second later)")
	if err := fs.Parse(args[1:]); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := c.alg.UnmarshalText([]byte(*alg)); err != nil {
		if strings.TrimSpace(strings.ToLower(*alg)) == "sliding_window" {
			bad("-algorithm: %q names no algorithm of the library: the sliding window counter is sliding_window_counter", *alg)
		} else {
			bad("-algorithm: %v", err)
		}
	} else if !slices.Contains(algorithms, c.alg) {
		bad("-algorithm: %s is not measured by fleetacc (token_bucket, fixed_window or sliding_window_counter)", c.alg)
	}
	for _, m := range strings.Split(*modes, ",") {
		m = strings.TrimSpace(m)
		if err := new(quota.Consistency).UnmarshalText([]byte(m)); err != nil || m != strings.ToLower(m) {
			bad("-modes: unknown mode %q (want exact, leased, async)", m)
			continue
		}
		if !slices.Contains(c.modes, m) {
			c.modes = append(c.modes, m)
		}
	}
	for _, l := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || (n != 1 && n != 4) {
			bad("-levels: %q is not 1 or 4", l)
			continue
		}
		if !slices.Contains(c.levels, n) {
			c.levels = append(c.levels, n)
		}
	}
	switch *pause {
	case "off":
		c.pauses = []bool{false}
	case "on":
		c.pauses = []bool{true}
	case "both":
		c.pauses = []bool{false, true}
	case "none":
		c.pauses = nil
	default:
		bad("-pause: %q is not off, on, both or none", *pause)
	}
	if c.procs < 1 || c.procs > 64 {
		bad("-procs: %d is out of range [1, 64]", c.procs)
	}
	if c.dur <= 0 || c.dur > 10*time.Minute {
		bad("-dur: %s is out of range (0, 10m]", c.dur)
	}
	if c.g < 1 || c.g > 1024 {
		bad("-g: %d is out of range [1, 1024]", c.g)
	}
	if c.keys < 1 || c.keys > 10_000 {
		bad("-keys: %d is out of range [1, 10000]", c.keys)
	}
	if c.rate < 1 || c.rate > 1_000_000 || c.burst < 1 || c.burst > 1_000_000 {
		bad("-rate %d / -burst %d: out of range [1, 1000000]", c.rate, c.burst)
	}
	if c.sync < tiers.MinSyncInterval || c.sync > tiers.MaxSyncInterval {
		bad("-sync: %s is out of range [%s, %s]", c.sync, tiers.MinSyncInterval, tiers.MaxSyncInterval)
	}
	if slices.Contains(c.pauses, true) && (c.pauseFor <= 0 || c.pauseEvery <= c.pauseFor) {
		bad("-pause-for %s must be positive and below -pause-every %s", c.pauseFor, c.pauseEvery)
	}
	if c.kill < 0 || c.killAt <= 0 || (c.kill > 0 && c.killAt+c.kill+2*time.Second > c.dur) {
		bad("-kill %s / -kill-at %s: the outage must start after 0 and end at least 2s before -dur %s", c.kill, c.killAt, c.dur)
	}
	if c.offered < 0 {
		bad("-offered: %v is negative", c.offered)
	}
	if c.maxOps < int64(c.g) {
		bad("-max-ops: %d is below -g %d", c.maxOps, c.g)
	}
	if c.instances != "fleet" && c.instances != "static" {
		bad("-instances: %q is not fleet or static", c.instances)
	}
	if err := new(quota.FailMode).UnmarshalText([]byte(c.onErr)); err != nil {
		bad("-on-store-error: %v", err)
	}
	if c.fbTimeout <= 0 {
		bad("-fallback-timeout: %s is not positive", c.fbTimeout)
	}
	if c.closedTimeout < 0 || (c.closedTimeout != 0 && c.closedTimeout < c.fbTimeout) {
		bad("-closed-timeout: %s is negative or below -fallback-timeout %s", c.closedTimeout, c.fbTimeout)
	}
	if c.timeout <= 0 {
		bad("-timeout: %s is not positive", c.timeout)
	}
	if *pause == "none" && c.kill <= 0 && !c.failover {
		bad("-pause none leaves no run without -kill or -failover")
	}
	if c.pauseNodes != "all" && c.pauseNodes != "rotate" {
		bad("-pause-nodes: %q is not all or rotate", c.pauseNodes)
	}
	if c.cluster && c.kill > 0 {
		bad("-kill restarts a standalone server empty; on a cluster use -failover")
	}
	if c.failover && !c.cluster {
		bad("-failover needs -cluster")
	}
	if c.failover && (c.nodeTimeout < 100*time.Millisecond || c.killAt+c.nodeTimeout+5*time.Second > c.dur) {
		bad("-failover: -node-timeout %s must be at least 100ms, and -kill-at %s + -node-timeout + 5s within -dur %s (the promotion and the way back)", c.nodeTimeout, c.killAt, c.dur)
	}
	if c.broken != "off" {
		if _, err := history.ParseFault(c.broken); err != nil {
			bad("-broken: %v", err)
		} else if !c.history {
			bad("-broken %s needs -history", c.broken)
		}
	}
	if slices.Contains(c.pauses, true) && (c.pauseStart < 0 || c.pauseStart >= c.dur) {
		bad("-pause-start: %s must be at least 0 and below -dur %s", c.pauseStart, c.dur)
	}
	if c.pauseStart != 0 && !slices.Contains(c.pauses, true) {
		bad("-pause-start needs paused runs (-pause on or both)")
	}
	if windowed(c.alg) {
		// A window's capacity is its rate: -burst has no meaning, and
		// the levels' burst (their bound's capacity) is the rate.
		if set["burst"] && c.burst != c.rate {
			bad("-burst %d: %s has no burst (its capacity is -rate %d a window); leave -burst out or set it to -rate", c.burst, c.alg, c.rate)
		}
		c.burst = c.rate
		for _, m := range c.modes {
			if m != "exact" {
				bad("-algorithm %s with -modes %s: leased and async rules need token_bucket (they book units ahead)", c.alg, m)
			}
		}
		if c.history {
			bad("-algorithm %s with -history: the history check models token buckets", c.alg)
		}
		if c.kill > 0 || c.failover {
			bad("-algorithm %s with -kill or -failover: their outage bounds are a token bucket's", c.alg)
		}
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("bad flags: %w", errors.Join(errs...))
	}
	return c, nil
}

// condition is what happens to Redis during a run.
type condition uint8

const (
	healthy  condition = iota
	paused             // SIGSTOP -pause-for every -pause-every
	killed             // SIGKILL at -kill-at, restarted -kill later
	failover           // a cluster master SIGKILLed at -kill-at, its replica promoted
)

func (c condition) String() string { return [...]string{"healthy", "paused", "killed", "failover"}[c] }

// spec is one run.
type spec struct {
	mode   string
	levels int
	cond   condition
}

func (s spec) String() string {
	return fmt.Sprintf("%s %d-level %s", s.mode, s.levels, s.cond)
}

// row is one measured run.
type row struct {
	spec
	results []childResult
	window  time.Duration
	// first and last are the start of the fleet's first decision and the
	// end of its last (Unix ns): the span the bounds are of.
	first, last int64
	redisCPU    time.Duration
	cpuKnown    bool
	pauses      int
	// killed runs: when Redis was killed and answered again (Unix ns),
	// and the last decision any process made without it.
	killedAt, restartedAt, lastDegraded, lastBack int64
	opens                                         int
	acc                                           accuracy
	decisions                                     uint64
	admitted                                      uint64
	errors                                        uint64
	degraded                                      uint64
	local                                         uint64
	// counted: what Redis's counting rule was charged (-count), and
	// whether it was read; fbCharged: the units the processes' fallback
	// stores admitted locally and reported.
	counted, fbCharged, fbDebt, fbOwed uint64
	countKnown                         bool
	// uncharged: some process's fallback could not charge its local
	// admits (-broken).
	uncharged bool
	rts       uint64
	leases    uint64
	returned  uint64
	reports   uint64
	debt      uint64
	repFail   uint64
	retFail   uint64
	firstErr  string
	closeErr  string
	minInst   int
	sources   map[string]uint64 // admitted decisions by Source
	// winCapped, of a window algorithm's run, is the most a perfect
	// limiter of that algorithm could admit given when the demand came:
	// per window (of each decision's start), the demand capped at the
	// limits (winCappedDemand); 0 otherwise.
	winCapped float64
	// hist is the check of the run's history (-history, exact runs).
	hist *history.Result
}

func (r *row) over() float64 { return float64(r.admitted) - r.acc.Allowed }

func (r *row) overPct() float64 { return 100 * max(0, r.over()) / r.acc.Allowed }

func (r *row) underPct() float64 { return 100 * max(0, -r.over()) / r.acc.Allowed }

func run(ctx context.Context, args []string, out io.Writer) ([]harness.Row, error) {
	_, err := runFleet(ctx, args, out)
	return nil, err
}

// runFleet runs every chosen mode × levels × condition and prints the
// table; the rows are returned with the error of a failed check.
func runFleet(ctx context.Context, args []string, out io.Writer) ([]*row, error) {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to run it as the fleet: %w", err)
	}
	target, err := openTarget(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer target.close()

	pauseDesc := "off"
	if slices.Contains(cfg.pauses, true) {
		pauseDesc = fmt.Sprintf("SIGSTOP %s every %s in paused runs", cfg.pauseFor, cfg.pauseEvery)
		if cfg.pauseStart > 0 {
			pauseDesc += fmt.Sprintf(", the first %s into the run", cfg.pauseStart)
		}
		if cfg.cluster {
			pauseDesc += map[string]string{"all": ", every master at once", "rotate": ", one master a pause in turn"}[cfg.pauseNodes]
		}
	}
	offered := "closed loop"
	if cfg.offered > 0 {
		offered = fmt.Sprintf("%.0f decisions/s offered by the fleet", cfg.offered)
	}
	harness.WriteHeader(out, args, []string{
		"redis:   " + target.where,
		fmt.Sprintf("fleet:   %d processes x %d goroutines, %s, %d shared principals, %s per process per run (max %d decisions), instances %s",
			cfg.procs, cfg.g, offered, cfg.keys, cfg.dur, cfg.maxOps, cfg.instances),
		fmt.Sprintf("stack:   redisstore%s -> fallback (timeout %s, closed timeout %s, instances as counted) -> localfirst -> tiers.Limiter; %s, on_store_error %s, async sync_interval %s",
			batchDesc(cfg), cfg.fbTimeout, closedBudget(cfg), cfg.alg, cfg.onErr, cfg.sync),
		"policy:  " + describeLevels(cfg.alg, levelsFor(1, cfg.rate, cfg.burst, cfg.keys)) + " | " + describeLevels(cfg.alg, levelsFor(4, cfg.rate, cfg.burst, cfg.keys)),
		"pause:   " + pauseDesc,
		"kill:    " + killDesc(cfg),
		"failover: " + failoverDesc(cfg),
		"history: " + historyDesc(cfg),
	}, []string{"github.com/redis/go-redis/v9"})

	var specs []spec
	for _, m := range cfg.modes {
		for _, l := range cfg.levels {
			for _, p := range cfg.pauses {
				specs = append(specs, spec{m, l, map[bool]condition{false: healthy, true: paused}[p]})
			}
			if cfg.kill > 0 {
				specs = append(specs, spec{m, l, killed})
			}
			if cfg.failover {
				specs = append(specs, spec{m, l, failover})
			}
		}
	}
	runID := strconv.FormatInt(time.Now().UnixNano()%1_000_000_007, 36)
	var rows []*row
	for i, s := range specs {
		r, err := measure(ctx, cfg, exe, target, s, fmt.Sprintf("fgacc:%s:%d:", runID, i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		fmt.Fprintf(out, "  run %d/%d  %-22s %8.0f decisions/s  admitted %d of %.0f allowed\n",
			i+1, len(specs), s, float64(r.decisions)/r.window.Seconds(), r.admitted, r.acc.Allowed)
		if r.hist != nil {
			fmt.Fprintf(out, "           history: %s\n", r.hist)
			if r.hist.Counterexample != "" {
				fmt.Fprintf(out, "           counterexample: %s\n", r.hist.Counterexample)
			}
		}
		rows = append(rows, r)
	}
	fmt.Fprintln(out)
	if err := writeTable(out, cfg, rows); err != nil {
		return nil, err
	}
	failed := writeTargets(out, cfg, rows)
	if la, ok := harness.LoadAvg(); ok {
		fmt.Fprintf(out, "loadavg: %s at end\n", la)
	}
	if len(failed) > 0 {
		return rows, fmt.Errorf("check failed: %s admitted more than a bucket's bound, recovered late, fell back on a slow Redis, or recorded a history that is not linearizable", strings.Join(failed, "; "))
	}
	return rows, nil
}

func describeLevels(alg quota.Algorithm, ls []level) string {
	var parts []string
	for _, l := range ls {
		k := "per principal"
		if l.shared {
			k = "shared"
		}
		if windowed(alg) {
			parts = append(parts, fmt.Sprintf("%s %d per %s window (%s)", l.name, l.rate, ruleWindow, k))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d/s burst %d (%s)", l.name, l.rate, l.burst, k))
	}
	return fmt.Sprintf("%d level(s): %s", len(ls), strings.Join(parts, ", "))
}

// proc is one running process of the fleet.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
}

// event is a line a process wrote, or the end of its output.
type event struct {
	i    int
	line string
	err  error
}

// measure runs one fleet: starts the processes, waits until all are
// ready, starts them together (and the pause injector), collects their
// results and computes the row.
func measure(ctx context.Context, cfg config, exe string, target *fleetTarget, s spec, prefix string) (*row, error) {
	if s.cond == failover {
		// A failover uses up a replica: every failover run has a
		// cluster of its own.
		t, err := openCluster(cfg, true)
		if err != nil {
			return nil, err
		}
		defer t.close()
		target = t
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.dur+90*time.Second)
	defer cancel()
	events := make(chan event, 4*cfg.procs)
	procs := make([]*proc, cfg.procs)
	var readers sync.WaitGroup
	done := make(chan struct{})
	defer func() {
		close(done)
		for _, p := range procs {
			if p != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
		readers.Wait()
	}()
	var histDir string
	if cfg.history && s.mode == "exact" {
		d, err := os.MkdirTemp("", "fleetacc-history-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		histDir = d
	}
	offered := 0.0
	if cfg.offered > 0 {
		offered = cfg.offered / float64(cfg.procs)
	}
	for i := range procs {
		cc := childConfig{
			Index: i, Procs: cfg.procs, Addrs: target.addrs, Cluster: target.cluster, Prefix: prefix, FleetKey: prefix + "{fleet}",
			Mode: s.mode, Algorithm: cfg.alg.String(), Levels: s.levels, Keys: cfg.keys, Rate: cfg.rate, Burst: cfg.burst, Sync: cfg.sync,
			Goroutines: cfg.g, Dur: cfg.dur, MaxOps: cfg.maxOps, Offered: offered, Instances: cfg.instances,
			OnStoreError: cfg.onErr, FBTimeout: cfg.fbTimeout, ClosedTimeout: cfg.closedTimeout, Batch: cfg.batch, Seed: cfg.seed, Count: cfg.count,
		}
		if histDir != "" {
			cc.HistoryFile = filepath.Join(histDir, fmt.Sprintf("proc-%d.jsonl", i))
			cc.Broken = cfg.broken
		}
		js, err := json.Marshal(cc)
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, exe, childFlag, string(js))
		cmd.WaitDelay = 5 * time.Second
		p := &proc{cmd: cmd, stderr: &tailBuffer{max: 8 << 10}}
		cmd.Stderr = p.stderr
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting process %d: %w", i, err)
		}
		procs[i] = p
		readers.Go(func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			send := func(ev event) bool {
				select {
				case events <- ev:
					return true
				case <-done:
					return false
				}
			}
			for sc.Scan() {
				if !send(event{i: i, line: sc.Text()}) {
					return
				}
			}
			send(event{i: i, err: io.EOF})
		})
	}
	failure := func(i int, what string) error {
		return fmt.Errorf("process %d %s; its standard error:\n%s", i, what, procs[i].stderr.String())
	}
	// wait collects one line starting with prefix from every process. A
	// process may end once it said it (the result is its last line).
	ended := make([]bool, cfg.procs)
	wait := func(prefix string, d time.Duration) ([]string, error) {
		got := make([]string, cfg.procs)
		n := 0
		timer := time.NewTimer(d)
		defer timer.Stop()
		for i := range ended {
			if ended[i] {
				return nil, failure(i, fmt.Sprintf("ended before it said %q", strings.TrimSpace(prefix)))
			}
		}
		for n < cfg.procs {
			select {
			case ev := <-events:
				if ev.err != nil {
					ended[ev.i] = true
					if got[ev.i] != "" {
						continue
					}
					werr := procs[ev.i].cmd.Wait()
					return nil, failure(ev.i, fmt.Sprintf("ended (%v) before it said %q", werr, strings.TrimSpace(prefix)))
				}
				if rest, ok := strings.CutPrefix(ev.line, prefix); ok && got[ev.i] == "" {
					got[ev.i] = rest
					n++
				}
			case <-timer.C:
				return nil, fmt.Errorf("%d of %d processes said %q within %s", n, cfg.procs, strings.TrimSpace(prefix), d)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return got, nil
	}
	if _, err := wait(readyLine, 30*time.Second); err != nil {
		return nil, err
	}
	cpu0, cpuErr := target.redisCPU(ctx)
	var inj *injector
	var k *killer
	var fo *failer
	switch s.cond {
	case paused:
		inj = startInjector(target.nodes, cfg.pauseNodes == "rotate", cfg.pauseStart, cfg.pauseEvery, cfg.pauseFor, cfg.dur)
		defer inj.stop() // on an early return: Redis is left running
	case killed:
		k = startKiller(target.proc, cfg.killAt, cfg.kill)
		defer k.wait() // on an early return: Redis is restarted
	case failover:
		key, err := principalKey(cfg, s, prefix)
		if err == nil {
			fo, err = startFailer(ctx, target, key, cfg.killAt)
		}
		if err != nil {
			return nil, err
		}
		defer fo.wait() //nolint:errcheck // on an early return
	}
	for i, p := range procs {
		if _, err := io.WriteString(p.stdin, goLine+"\n"); err != nil {
			return nil, failure(i, "did not take the start line: "+err.Error())
		}
	}
	lines, err := wait(resultLine, cfg.dur+60*time.Second)
	r := &row{spec: s}
	if inj != nil {
		r.pauses = inj.stop()
		err = errors.Join(err, inj.err)
	}
	if k != nil {
		err = errors.Join(err, k.wait())
		r.killedAt, r.restartedAt = k.killedAt, k.restartedAt
	}
	if fo != nil {
		err = errors.Join(err, fo.wait())
		r.killedAt, r.restartedAt = fo.killedAt, fo.promotedAt
	}
	if err != nil {
		return nil, err
	}
	cpu1, cpuErr1 := target.redisCPU(ctx)
	r.redisCPU, r.cpuKnown = cpu1-cpu0, cpuErr == nil && cpuErr1 == nil
	for i, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			return nil, failure(i, "failed: "+err.Error())
		}
	}
	for i, l := range lines {
		var cr childResult
		if err := json.Unmarshal([]byte(l), &cr); err != nil {
			return nil, failure(i, "wrote a bad result: "+err.Error())
		}
		r.results = append(r.results, cr)
	}
	r.compute(cfg)
	if histDir != "" {
		var h history.History
		for i := range procs {
			ops, err := readHistory(filepath.Join(histDir, fmt.Sprintf("proc-%d.jsonl", i)))
			if err != nil {
				return nil, failure(i, "wrote a bad history: "+err.Error())
			}
			h.Ops = append(h.Ops, ops...)
		}
		if k != nil {
			h.Resets = append(h.Resets, history.Reset{From: k.killedAt, To: k.restartedAt})
		}
		if fo != nil {
			keys, err := fo.keysOnVictim(ctx, target, h)
			if err != nil {
				return nil, err
			}
			h.Resets = append(h.Resets, history.Reset{From: fo.killedAt, To: fo.promotedAt, Keys: keys})
		}
		res, err := history.Check(h, history.Options{Timeout: 5 * time.Minute})
		if err != nil {
			return nil, fmt.Errorf("checking the history: %w", err)
		}
		r.hist = &res
	}
	if cfg.count && s.cond != killed {
		n, err := readCount(ctx, cfg, target, prefix, s, r.first)
		if err != nil {
			return nil, fmt.Errorf("reading Redis's count: %w", err)
		}
		r.counted, r.countKnown = n, true
	}
	return r, nil
}

// readHistory reads the takes a process recorded, one JSON object a line.
func readHistory(path string) ([]history.Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []history.Op
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var o history.Op
		if err := dec.Decode(&o); err == io.EOF {
			return ops, nil
		} else if err != nil {
			return nil, err
		}
		ops = append(ops, o)
	}
}

// batchDesc describes the store's batching.
func batchDesc(cfg config) string {
	switch {
	case !cfg.batch:
		return " (batching off)"
	}
	return " (default batching)"
}

// historyDesc describes what -history records and checks.
func historyDesc(cfg config) string {
	if !cfg.history {
		return "off"
	}
	d := "exact runs record every take (batched: each placed between its send and its answer) and check the merged history for linearizability"
	if !cfg.batch {
		d = "exact runs record every take (batching off, Redis time from each reply) and check the merged history for linearizability"
	}
	if cfg.broken != "off" {
		d += "; process 0's store deliberately broken (-broken " + cfg.broken + "): the check must fail"
	}
	return d
}

// compute sums the processes' results and compares them with the bounds.
func (r *row) compute(cfg config) {
	perKey, demand := make([]uint64, cfg.keys), make([]uint64, cfg.keys)
	winDemand := map[int64][]uint64{}
	var first, last int64
	r.minInst = cfg.procs
	for _, c := range r.results {
		if c.Decisions > 0 {
			if first == 0 || c.First < first {
				first = c.First
			}
			last = max(last, c.Last)
		}
		r.decisions += c.Decisions
		r.admitted += c.Admitted
		r.errors += c.Errors
		r.degraded += c.Degraded
		r.rts += c.RoundTrips
		st := c.Stats
		r.local += st.LocalAllowed + st.LocalDenied
		r.leases += st.Leases
		r.returned += st.ReturnedUnits
		r.reports += st.Reports
		r.debt += st.DebtUnits
		r.repFail += st.ReportFailures
		r.retFail += st.ReturnFailures
		r.fbCharged += c.Fallback.Charged
		r.fbDebt += c.Fallback.Debt
		r.fbOwed += c.Fallback.Owed
		r.uncharged = r.uncharged || c.Uncharged
		for k, n := range c.PerKey {
			perKey[k] += n
		}
		for k, n := range c.Demand {
			demand[k] += n
		}
		for win, wd := range c.WinDemand {
			if winDemand[win] == nil {
				winDemand[win] = make([]uint64, cfg.keys)
			}
			for k, n := range wd {
				winDemand[win][k] += n
			}
		}
		if r.firstErr == "" {
			r.firstErr = c.FirstErr
		}
		if r.closeErr == "" {
			r.closeErr = c.CloseErr
		}
		for src, n := range c.Sources {
			if name, ok := strings.CutPrefix(src, "+"); ok {
				if r.sources == nil {
					r.sources = make(map[string]uint64)
				}
				r.sources[name] += n
			}
		}
		r.minInst = min(r.minInst, c.Instances)
		r.lastDegraded = max(r.lastDegraded, c.LastDegraded)
		r.lastBack = max(r.lastBack, c.LastBack)
		r.opens += c.Opens
	}
	r.window = time.Duration(last - first)
	r.first, r.last = first, last
	slack := func(level) float64 { return 0 }
	if r.mode == "async" {
		slack = func(l level) float64 { return asyncSlack(cfg, l) }
	}
	if r.cond == killed {
		slack = func(l level) float64 { return killSlack(cfg, r.mode, l) }
	}
	if r.cond == failover {
		slack = func(l level) float64 { return failoverSlack(l, r.outage()) }
	}
	if r.cond == paused && r.mode == "exact" && cfg.onErr == "local" {
		slack = func(l level) float64 { return localSlack(cfg, l) }
	}
	ls := levelsFor(r.levels, cfg.rate, cfg.burst, cfg.keys)
	r.acc = measureAccuracy(ls, perKey, demand, boundsFor(cfg.alg, first, last), slack)
	if windowed(cfg.alg) {
		r.winCapped = winCappedDemand(ls, winDemand)
	}
}

func writeTable(w io.Writer, cfg config, rows []*row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode  \tlevels\tredis\tdecisions/s\tadmitted\tallowed\tover\tover %\tunder %\tbucket over\tlocal %\tRT/decision\tredis CPU µs/decision\tleases\treturned\treports\tdebt\terrors\tdegraded\topens\tcharged local\tredis count\tcount - admitted\t")
	for _, r := range rows {
		cond := r.cond.String()
		switch r.cond {
		case paused:
			cond = fmt.Sprintf("paused x%d", r.pauses)
		case killed:
			cond = fmt.Sprintf("killed %s", cfg.kill)
		case failover:
			cond = "master failover"
		}
		per := func(v float64) float64 {
			if r.decisions == 0 {
				return 0
			}
			return v / float64(r.decisions)
		}
		rcpu := "n/a"
		if r.cpuKnown && r.cond != killed && r.cond != failover { // a restarted Redis counts from 0; a dead master cannot say
			rcpu = strconv.FormatFloat(per(float64(r.redisCPU)/float64(time.Microsecond)), 'f', 2, 64)
		}
		count, diff := "n/a", "n/a"
		if r.countKnown {
			count, diff = strconv.FormatUint(r.counted, 10), strconv.FormatInt(int64(r.counted)-int64(r.admitted), 10)
		}
		fmt.Fprintf(tw, "%-6s\t%d\t%s\t%.0f\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.0f\t%.1f\t%.3f\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n",
			r.mode, r.levels, cond, float64(r.decisions)/r.window.Seconds(), r.admitted, r.acc.Allowed,
			max(0, r.over()), r.overPct(), r.underPct(), r.acc.Excess, 100*per(float64(r.local)),
			per(float64(r.rts)), rcpu, r.leases, r.returned, r.reports, r.debt, r.errors, r.degraded, r.opens,
			r.fbCharged, count, diff)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		var notes []string
		if r.errors > 0 {
			notes = append(notes, fmt.Sprintf("%d decisions returned an error, first: %s", r.errors, r.firstErr))
		}
		if r.closeErr != "" {
			notes = append(notes, "Close: "+r.closeErr)
		}
		if r.repFail > 0 || r.retFail > 0 {
			notes = append(notes, fmt.Sprintf("%d reports and %d lease returns failed (each resolved, and sent again only if it was not applied)", r.repFail, r.retFail))
		}
		if r.minInst < len(r.results) {
			notes = append(notes, fmt.Sprintf("a process started counting %d instances, not %d", r.minInst, len(r.results)))
		}
		if r.acc.Excess > 0 {
			notes = append(notes, fmt.Sprintf("bucket %s admitted the most over its bound", r.acc.Worst))
		}
		if r.cond == killed {
			notes = append(notes, fmt.Sprintf("Redis killed for %s: %d decisions without it; every process back on Redis %s after it answered again (promised within %s), the last decision without it %s after; outage bound %.0f allowed",
				time.Duration(r.restartedAt-r.killedAt).Round(time.Millisecond), r.degraded, r.recovery().Round(time.Millisecond), recoveryBound(cfg), r.lastLocal().Round(time.Millisecond), r.acc.Formula))
		}
		if r.cond == failover {
			notes = append(notes, failoverNote(cfg, r))
		}
		if windowed(cfg.alg) {
			notes = append(notes, fmt.Sprintf("a perfect %s admits at most %.0f here: each window's demand (by decision start) capped at its limits (under %.2f%% against it)",
				cfg.alg, r.winCapped, 100*max(0, r.winCapped-float64(r.admitted))/max(1, r.winCapped)))
		}
		if r.degraded > 0 || r.acc.Excess > 0 {
			notes = append(notes, "admitted by source: "+formatSources(r.sources))
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "%s: %s\n", r.spec, strings.Join(notes, "; "))
		}
	}
	return nil
}

// writeTargets prints the modes' targets against the rows and returns the
// runs that failed the enforced one (exact and leased never over).
func writeTargets(w io.Writer, cfg config, rows []*row) []string {
	var failed []string
	fmt.Fprintln(w, "\ntargets:")
	for _, r := range rows {
		var checks []string
		if r.hist != nil {
			ok := r.hist.Verdict == history.Linearizable
			checks = append(checks, fmt.Sprintf("history of %d takes linearizable: %s", r.hist.Takes, map[bool]string{true: "met", false: "FAILED (" + r.hist.Verdict.String() + ")"}[ok]))
			if !ok {
				failed = append(failed, r.spec.String())
			}
		}
		if r.cond == killed {
			ok := r.acc.FormulaExcess == 0
			what := "within the outage bound"
			if !killBoundEnforced(cfg) {
				what += " (a target with on_store_error " + cfg.onErr + ")"
				ok = true
			}
			checks = append(checks, fmt.Sprintf("%s (%.0f allowed): %s", what, r.acc.Formula, metStr(r.acc.FormulaExcess == 0)))
			rok := r.recovery() <= recoveryBound(cfg)
			checks = append(checks, fmt.Sprintf("back on Redis %s after restart <= %s: %s", r.recovery().Round(time.Millisecond), recoveryBound(cfg), metStr(rok)))
			if !ok || !rok {
				failed = append(failed, r.spec.String())
			}
			fmt.Fprintf(w, "  %-24s %s\n", r.spec, strings.Join(checks, ", "))
			continue
		}
		if r.cond == failover {
			fc, ok := failoverChecks(cfg, r)
			checks = append(checks, fc...)
			if !ok {
				failed = append(failed, r.spec.String())
			}
			fmt.Fprintf(w, "  %-24s %s\n", r.spec, strings.Join(checks, ", "))
			continue
		}
		if r.cond == paused {
			// Redis slow in bursts is not down. No breaker
			// opens; with on_store_error closed (whose calls wait the
			// closed budget) no decision is made without Redis at all,
			// so no login is denied for want of it.
			ok := r.opens == 0 && (cfg.onErr != "closed" || r.degraded == 0)
			checks = append(checks, fmt.Sprintf("slow is not down (%d breaker opens, %d decisions without Redis): %s", r.opens, r.degraded, metStr(ok)))
			if !ok {
				failed = append(failed, r.spec.String())
			}
		}
		if r.cond == paused && r.mode == "exact" && cfg.onErr == "local" {
			// Local decisions during the pauses may go over, within the
			// fallback's bound; what they admitted is charged to Redis
			// once it answers.
			checks = append(checks, fmt.Sprintf("over within the fallback's bound (%.0f allowed): %s", r.acc.Formula, metStr(r.acc.FormulaExcess == 0)))
			checks = append(checks, fmt.Sprintf("under %.2f%% <= 5%%: %s", r.underPct(), metStr(r.underPct() <= 5)))
			if r.countKnown {
				checks = append(checks, fmt.Sprintf("Redis's count %d = admitted %d: %s", r.counted, r.admitted, metStr(r.counted == r.admitted)))
			}
			fmt.Fprintf(w, "  %-24s %s\n", r.spec, strings.Join(checks, ", "))
			continue
		}
		switch r.mode {
		case "exact", "leased":
			if r.acc.Excess == 0 {
				checks = append(checks, "0 over: met")
			} else {
				checks = append(checks, fmt.Sprintf("0 over: FAILED (%.0f units over the buckets' bounds)", r.acc.Excess))
				failed = append(failed, r.spec.String())
			}
			if r.mode == "leased" {
				checks = append(checks, fmt.Sprintf("under %.2f%% <= 5%%: %s", r.underPct(), metStr(r.underPct() <= 5)))
			}
		case "async":
			checks = append(checks, fmt.Sprintf("within n x rate x sync (%.0f allowed): %s", r.acc.Formula, metStr(r.acc.FormulaExcess == 0)))
			t := fmt.Sprintf("over %.2f%% <= 2%%: %s", r.overPct(), metStr(r.overPct() <= 2))
			if cfg.procs != 8 || cfg.sync != 50*time.Millisecond {
				t += " (the target is set for 8 processes at 50ms)"
			}
			checks = append(checks, t)
		}
		fmt.Fprintf(w, "  %-24s %s\n", r.spec, strings.Join(checks, ", "))
	}
	return failed
}

func metStr(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if extra := t.b.Len() - t.max; extra > 0 {
		t.b.Next(extra)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// formatSources lists counts by source, largest first.
func formatSources(m map[string]uint64) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, m[n])
	}
	return strings.Join(parts, ", ")
}
