// Command rls benchmarks floodgate's Envoy rate limit service (floodgate-rls
// serve-rls) against envoyproxy/ratelimit's, on one redis-server, under
// the same gRPC load. See README.md.
//
//	go run . [-c 64] [-descriptors 1,4] [-rounds 3] [-duration 2s] [-warmup 500ms]
//	         [-keys 10000] [-conns 4] [-only floodgate,envoyproxy,envoyproxy-tuned,floor,floodgate-async]
//	         [-window 150us] [-pool 64] [-max-ops 2000000] [-seed 1] [-short]
//	go run . -diff [-v] [-log FILE]      (or -diff-self)
//
// It starts its own redis-server on a free loopback port (testing/redistest),
// builds floodgate-rls from this repository and envoyproxy/ratelimit's
// service_cmd from the Go module proxy (go run, cached in the go build
// cache), runs each as a process on loopback, and measures each contender
// in interleaved rounds: for every round, for 1 and 4 descriptors per
// call, every contender in turn, with Redis flushed before each.
//
// With -diff it runs the differential test instead: envoyproxy/ratelimit
// and floodgate-rls, each on its own redis-server, answer the same calls
// on the same configurations, and every difference is classified by kind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

type config struct {
	c, conns, keys, rounds int
	descs                  []int
	duration, warmup       time.Duration
	window                 time.Duration
	pool                   int
	maxOps                 int64
	seed                   uint64
	only                   []string
	inprocess, short       bool
	headers                bool
	diff, verbose          bool
	diffSelf               bool
	logPath, cpuProfile    string
}

// contenderNames are the -only names, in table order.
var contenderNames = []string{"floodgate", "envoyproxy", "envoyproxy-tuned", "floor", "floodgate-async"}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c                config
		descs, only      string
		seed             int64
		maxOps           int64
		duration, warmup time.Duration
	)
	fs.IntVar(&c.c, "c", 64, "calls in flight (closed loop)")
	fs.IntVar(&c.conns, "conns", 4, "gRPC connections to each contender (calls spread over them)")
	fs.IntVar(&c.keys, "keys", 10000, "principals (address, user; tenant = principal/100)")
	fs.IntVar(&c.rounds, "rounds", 3, "interleaved rounds")
	fs.StringVar(&descs, "descriptors", "1,4", "descriptors per call: 1 and/or 4")
	fs.DurationVar(&duration, "duration", 2*time.Second, "measured time per contender, descriptor count and round")
	fs.DurationVar(&warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each measured phase")
	fs.DurationVar(&c.window, "window", 150*time.Microsecond, "REDIS_PIPELINE_WINDOW of the envoyproxy-tuned contender (its documented throughput setting)")
	fs.IntVar(&c.pool, "pool", 0, "REDIS_POOL_SIZE of the envoyproxy-tuned contender (0: -c, one connection per call in flight)")
	fs.Int64Var(&maxOps, "max-ops", 2_000_000, "at most this many calls per measured phase")
	fs.Int64Var(&seed, "seed", 1, "seed of the workers' random streams")
	fs.StringVar(&only, "only", strings.Join(contenderNames[:4], ","), "contenders: floodgate, envoyproxy, envoyproxy-tuned, floor (gRPC answering OK without deciding), floodgate-async (the translation in consistency async: token buckets decided locally; not in the default set)")
	fs.BoolVar(&c.headers, "headers", false, "every service adds its rate limit response headers (floodgate-rls its default draft-10 RateLimit-Policy and RateLimit, envoyproxy/ratelimit LIMIT_RESPONSE_HEADERS_ENABLED=true); default: none does, envoyproxy/ratelimit's default (floodgate-rls -headers=false)")
	fs.BoolVar(&c.inprocess, "inprocess", false, "serve floodgate from this process instead of a floodgate-rls process (the program's tests; no server CPU column)")
	fs.BoolVar(&c.diff, "diff", false, "run the differential test instead: envoyproxy/ratelimit and floodgate-rls, each on its own redis-server, answer the same calls on the same configurations; print the differences by kind (exit 1 on a kind that is not documented)")
	fs.BoolVar(&c.diffSelf, "diff-self", false, "run the differential test against a second envoyproxy/ratelimit instead of floodgate-rls: a check of the harness (no difference expected)")
	fs.BoolVar(&c.verbose, "v", false, "with -diff: print every call with both answers")
	fs.BoolVar(&c.short, "short", false, "one round of 1s per phase with a 200ms warm-up")
	fs.StringVar(&c.logPath, "log", "", "write the contenders' own output to `FILE` (default: discarded)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (with -inprocess: client and floodgate server) to `FILE`")
	if err := fs.Parse(args[1:]); err != nil {
		return c, err
	}
	c.duration, c.warmup, c.maxOps, c.seed = duration, warmup, maxOps, uint64(seed)
	if c.short {
		c.rounds, c.duration, c.warmup = 1, time.Second, 200*time.Millisecond
	}
	var bad []string
	for _, s := range strings.Split(descs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || (n != 1 && n != 4) {
			bad = append(bad, fmt.Sprintf("-descriptors: %q is not 1 or 4", s))
			continue
		}
		if !slices.Contains(c.descs, n) {
			c.descs = append(c.descs, n)
		}
	}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(contenderNames, s) {
			bad = append(bad, fmt.Sprintf("-only: unknown contender %q (want %s)", s, strings.Join(contenderNames, ", ")))
			continue
		}
		c.only = append(c.only, s)
	}
	switch {
	case c.c < 1 || c.c > 4096:
		bad = append(bad, fmt.Sprintf("-c %d is out of range [1, 4096]", c.c))
	case c.conns < 1 || c.conns > 64:
		bad = append(bad, fmt.Sprintf("-conns %d is out of range [1, 64]", c.conns))
	case c.keys < 1 || c.keys > MaxKeys:
		bad = append(bad, fmt.Sprintf("-keys %d is out of range [1, %d]", c.keys, MaxKeys))
	case c.rounds < 1 || c.rounds > 20:
		bad = append(bad, fmt.Sprintf("-rounds %d is out of range [1, 20]", c.rounds))
	case c.duration <= 0 || c.duration > time.Minute || c.warmup < 0 || c.warmup > time.Minute:
		bad = append(bad, "-duration must be in (0, 1m] and -warmup in [0, 1m]")
	case c.maxOps < 1:
		bad = append(bad, "-max-ops must be at least 1")
	case c.window < 0 || c.pool < 0:
		bad = append(bad, "-window and -pool must be >= 0")
	}
	if c.pool == 0 {
		c.pool = c.c
	}
	if len(bad) > 0 {
		return c, errors.New(strings.Join(bad, "; "))
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rls bench: %v\n", err)
		return 2
	}
	if cfg.diff || cfg.diffSelf {
		if err := diff(cfg, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "rls diff: %v\n", err)
			return 1
		}
		return 0
	}
	if err := bench(cfg, args, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "rls bench: %v\n", err)
		return 1
	}
	return 0
}

// row accumulates one contender's phases at one descriptor count.
type row struct {
	name                string
	ops, ok, over, errs int64
	firstErr            error
	elapsed             time.Duration
	best                float64
	lat                 []time.Duration
	redisCPU, srvCPU    time.Duration
	clientCPU           time.Duration
	srvCPUKnown         bool
	calls               int64
	byCmd               map[string]int64
}

func bench(cfg config, args []string, stdout, stderr io.Writer) error {
	var childLog io.Writer = io.Discard
	if cfg.logPath != "" {
		f, err := os.Create(cfg.logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		childLog = f
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	work, err := os.MkdirTemp("", "floodgate-bench-rls")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	redisProc, err := redistest.StartProcessHandle()
	if err != nil {
		return err
	}
	defer redisProc.Stop()
	redisAddr := redisProc.Addr()
	rc := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rc.Close()
	ctx := context.Background()
	redisVersion := "?"
	if info, err := rc.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				redisVersion = v
			}
		}
	}

	var contenders []*contender
	defer func() {
		for _, c := range contenders {
			if !c.down {
				c.stop()
			}
		}
	}()
	// floodgate-rls is built once, for whichever rows run it.
	var fgBin string
	floodgateBin := func() (string, error) {
		if fgBin != "" {
			return fgBin, nil
		}
		bin, err := buildFloodgate()
		if err == nil {
			fgBin = bin
		}
		return bin, err
	}
	for _, name := range cfg.only {
		var (
			c   *contender
			err error
		)
		switch name {
		case "floodgate":
			if cfg.inprocess {
				c, err = startInProcess(redisAddr, cfg.headers)
				break
			}
			var bin string
			if bin, err = floodgateBin(); err == nil {
				c, err = startFloodgate(bin, work, redisAddr, "", cfg.headers, childLog)
			}
		case "floodgate-async":
			var bin string
			if bin, err = floodgateBin(); err == nil {
				c, err = startFloodgate(bin, work, redisAddr, "async", cfg.headers, childLog)
			}
		case "floor":
			var bin string
			if bin, err = buildFloor(); err == nil {
				c, err = startFloor(bin, childLog)
			}
		case "envoyproxy", "envoyproxy-tuned":
			var bin string
			if bin, err = buildRatelimit(stderr); err == nil {
				c, err = startRatelimit(bin, work, redisAddr, name == "envoyproxy-tuned", cfg.window, cfg.pool, cfg.headers, childLog)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		contenders = append(contenders, c)
	}
	probe, _ := requests(1, 1)
	for _, c := range contenders {
		if err := waitReady(c, probe[0]); err != nil {
			return err
		}
		if strings.HasPrefix(c.name, "floodgate") {
			if err := health(c.addr); err != nil {
				return fmt.Errorf("%s health: %w", c.name, err)
			}
		}
	}
	type conns struct {
		cls   []*grpc.ClientConn
		close func()
	}
	cl := make([]conns, len(contenders))
	for i, c := range contenders {
		cs, closeAll, err := clients(c.addr, cfg.conns)
		if err != nil {
			return err
		}
		defer closeAll()
		cl[i] = conns{cls: cs, close: closeAll}
	}
	reqs := map[int][]rawRequest{}
	for _, n := range cfg.descs {
		rs, err := requests(cfg.keys, n)
		if err != nil {
			return err
		}
		if reqs[n], err = marshalAll(rs); err != nil {
			return err
		}
	}

	startLoad := loadAvg()
	tot0, steal0, stealOK := stealTicks()
	rows := map[[2]int]*row{} // (descriptors, contender index)
	fmt.Fprintf(stderr, "measuring: %d round(s) x %v descriptors x %d contenders, %s each (+%s warm-up)\n",
		cfg.rounds, cfg.descs, len(contenders), cfg.duration, cfg.warmup)
	for r := range cfg.rounds {
		for _, n := range cfg.descs {
			for i, c := range contenders {
				if c.down {
					if err := c.restart(); err != nil {
						return fmt.Errorf("%s: restart: %w", c.name, err)
					}
					c.down = false
					if err := waitReady(c, probe[0]); err != nil {
						return err
					}
				}
				if err := rc.FlushAll(ctx).Err(); err != nil {
					return err
				}
				if cfg.warmup > 0 {
					runPhase(cl[i].cls, reqs[n], cfg.c, cfg.warmup, cfg.maxOps, cfg.seed+1000, false)
				}
				rs0, err := readRedis(ctx, rc)
				if err != nil {
					return err
				}
				cpu0, cpuOK := processCPU(c.pid)
				self0, _ := processCPU(os.Getpid())
				res := runPhase(cl[i].cls, reqs[n], cfg.c, cfg.duration, cfg.maxOps, cfg.seed, true)
				self1, _ := processCPU(os.Getpid())
				cpu1, _ := processCPU(c.pid)
				if c.restart != nil {
					// Its Close reports every hit it deferred (and the
					// warm-up's: a little more than the phase's own).
					c.stop()
					c.down = true
				}
				rs1, err := readRedis(ctx, rc)
				if err != nil {
					return err
				}
				k := [2]int{n, i}
				rw := rows[k]
				if rw == nil {
					rw = &row{name: c.name, srvCPUKnown: cpuOK}
					rows[k] = rw
				}
				rw.ops += res.ops
				rw.ok += res.ok
				rw.over += res.over
				rw.errs += res.errs
				if rw.firstErr == nil {
					rw.firstErr = res.firstErr
				}
				rw.elapsed += res.elapsed
				rw.lat = append(rw.lat, res.lat...)
				rw.redisCPU += rs1.cpu - rs0.cpu
				rw.calls += rs1.calls - rs0.calls
				if rw.byCmd == nil {
					rw.byCmd = map[string]int64{}
				}
				for cmd, n := range rs1.byCmd {
					rw.byCmd[cmd] += n - rs0.byCmd[cmd]
				}
				rw.srvCPU += cpu1 - cpu0
				rw.clientCPU += self1 - self0
				if tp := float64(res.ok+res.over) / res.elapsed.Seconds(); tp > rw.best {
					rw.best = tp
				}
				fmt.Fprintf(stderr, "  round %d, %d descriptor(s), %-36s %9.0f calls/s\n", r+1, n, c.name, float64(res.ok+res.over)/res.elapsed.Seconds())
			}
		}
	}
	tot1, steal1, _ := stealTicks()

	// Header: enough to reproduce and to judge the noise.
	fmt.Fprintf(stdout, "command: (in bench/rls) go run . %s\n", commandLine(args[1:]))
	fmt.Fprintf(stdout, "date:    %s\n", time.Now().UTC().Format(time.RFC3339))
	host, _ := os.Hostname()
	fmt.Fprintf(stdout, "go:      %s %s/%s, NumCPU=%d GOMAXPROCS=%d host=%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), host)
	fmt.Fprintf(stdout, "loadavg: %s at start, %s at end", startLoad, loadAvg())
	if stealOK && tot1 > tot0 {
		fmt.Fprintf(stdout, "; CPU steal %.1f%% during the run", 100*float64(steal1-steal0)/float64(tot1-tot0))
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "redis:   redis-server %s on %s (started by this program; flushed before each phase)\n", redisVersion, redisAddr)
	fmt.Fprintf(stdout, "load:    c=%d calls in flight over %d gRPC connections per contender, %d principals, %d round(s) of %s (+%s warm-up), interleaved\n",
		cfg.c, cfg.conns, cfg.keys, cfg.rounds, cfg.duration, cfg.warmup)
	fmt.Fprintf(stdout, "contenders: floodgate-rls serve-rls (this repository, as the command composes it: redisstore with batching, fallback, local-first; -store-timeout 1s)\n")
	fmt.Fprintf(stdout, "              serving the translation of the envoyproxy/ratelimit configuration (translate -as tenant=tenant -as user=user);\n")
	fmt.Fprintf(stdout, "            envoyproxy-ratelimit: envoyproxy/ratelimit %s service_cmd (go run pkg@version) with its defaults\n", RatelimitVersion)
	fmt.Fprintf(stdout, "              (REDIS_POOL_SIZE 10, no pipeline window, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT off, USE_STATSD=false);\n")
	fmt.Fprintf(stdout, "            envoyproxy-ratelimit-tuned: the same with REDIS_PIPELINE_WINDOW=%s and REDIS_POOL_SIZE=%d\n", cfg.window, cfg.pool)
	if slices.Contains(cfg.only, "floodgate-async") {
		fmt.Fprintf(stdout, "            floodgate-rls-async: floodgate-rls serving the translation with -consistency async: token buckets of the same rates\n")
		fmt.Fprintf(stdout, "              decided locally (tiers/localfirst) and reported to Redis at the 50ms sync interval's cadence: not the same limits as the fixed windows\n")
	}
	if slices.Contains(cfg.only, "floor") {
		fmt.Fprintf(stdout, "            grpc-floor: cmd/rls-floor, the same gRPC service answering every descriptor OK without deciding (no Redis),\n")
		fmt.Fprintf(stdout, "              with floodgate-rls's server options: what the transport costs before a service does any work\n")
	}
	if cfg.headers {
		fmt.Fprintf(stdout, "headers: on (-headers): floodgate-rls adds RateLimit-Policy and RateLimit (its default), envoyproxy/ratelimit RateLimit-Limit, -Remaining\n")
		fmt.Fprintf(stdout, "              and -Reset (LIMIT_RESPONSE_HEADERS_ENABLED=true); grpc-floor adds none\n")
	} else {
		fmt.Fprintf(stdout, "headers: off, envoyproxy/ratelimit's default: floodgate-rls runs with -headers=false (-headers turns them on in every service)\n")
	}
	for _, n := range cfg.descs {
		fmt.Fprintf(stdout, "\n%d descriptor(s) per call\n", n)
		// The yardstick: the envoyproxy row with the most calls/s.
		var (
			envoyBest float64
			envoyCPU  float64 // its server + Redis CPU per call, µs
		)
		for i := range contenders {
			if rw := rows[[2]int{n, i}]; rw != nil && strings.HasPrefix(rw.name, "envoyproxy") {
				if tp := float64(rw.ok+rw.over) / rw.elapsed.Seconds(); tp > envoyBest {
					envoyBest, envoyCPU = tp, rw.cpuPerCall()
				}
			}
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "contender\tcalls/s\tbest round/s\tp50 ms\tp99 ms\tserver CPU µs/call\tredis CPU µs/call\tclient CPU µs/call\tredis cmds/call\tOK %\terrors\tx envoyproxy\tCPU x envoyproxy\t")
		for i := range contenders {
			rw := rows[[2]int{n, i}]
			if rw == nil {
				continue
			}
			done := rw.ok + rw.over
			tp := float64(done) / rw.elapsed.Seconds()
			sortDurations(rw.lat)
			srv := "n/a"
			if rw.srvCPUKnown && done > 0 {
				srv = fmt.Sprintf("%.1f", float64(rw.srvCPU.Microseconds())/float64(done))
			}
			ratio, cpuRatio := "-", "-"
			if envoyBest > 0 {
				ratio = fmt.Sprintf("%.2f", tp/envoyBest)
				if c := rw.cpuPerCall(); c > 0 && envoyCPU > 0 && rw.srvCPUKnown {
					cpuRatio = fmt.Sprintf("%.2f", envoyCPU/c)
				}
			}
			okPct := 0.0
			if done > 0 {
				okPct = 100 * float64(rw.ok) / float64(done)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%.2f\t%s\t%.1f\t%.1f\t%.2f\t%.1f\t%d\t%s\t%s\t\n", rw.name, tp, rw.best,
				ms(quantile(rw.lat, 0.5)), ms(quantile(rw.lat, 0.99)), srv,
				float64(rw.redisCPU.Microseconds())/float64(max(done, 1)), float64(rw.clientCPU.Microseconds())/float64(max(done, 1)),
				float64(rw.calls)/float64(max(done, 1)), okPct, rw.errs, ratio, cpuRatio)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for i := range contenders {
			rw := rows[[2]int{n, i}]
			if rw == nil {
				continue
			}
			fmt.Fprintf(stdout, "  %s: redis commands per call: %s\n", rw.name, perCall(rw.byCmd, rw.ok+rw.over))
			if rw.firstErr != nil {
				fmt.Fprintf(stdout, "  first error of %s: %v\n", rw.name, rw.firstErr)
			}
		}
	}
	return nil
}

// cpuPerCall is the server's and Redis's CPU per call, µs (the server's
// when known).
func (rw *row) cpuPerCall() float64 {
	done := rw.ok + rw.over
	if done == 0 {
		return 0
	}
	return float64((rw.srvCPU + rw.redisCPU).Microseconds()) / float64(done)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// commandLine quotes args so the line can be pasted into a shell.
func commandLine(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// perCall lists the commands Redis ran per call, most first.
func perCall(byCmd map[string]int64, calls int64) string {
	type kv struct {
		cmd string
		n   int64
	}
	var l []kv
	for c, n := range byCmd {
		if n > 0 {
			l = append(l, kv{c, n})
		}
	}
	slices.SortFunc(l, func(a, b kv) int { return int(b.n - a.n) })
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = fmt.Sprintf("%s %.2f", strings.ToUpper(e.cmd), float64(e.n)/float64(max(calls, 1)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
