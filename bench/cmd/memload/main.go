// Command memload drives a gRPC service whose handler holds memory past
// what its GOMEMLIMIT allows, and compares floodgate's adaptive shedder
// with and without the memory signal (shedder.AdaptiveCapacity.
// MemoryTarget, package shedder/mem).
//
// The service runs in a process of its own with GOMEMLIMIT=-limit and
// GOMAXPROCS=-server-procs; each call allocates -buffer bytes, writes
// every page of it, and holds it for -hold. Load is open loop: Poisson
// arrivals at the rate whose buffers in flight are -overload x the limit
// (rate = overload x limit / (buffer x hold)), every call of the default
// priority with a -deadline; a shed call is not retried. Rows, one fresh
// service process each, interleaved every round:
//
//	latency        the adaptive shedder as it was: latency alone
//	latency+cpu    the same with cpu_target 0.9 (the process's CPU)
//	memory         the same with memory_target -target (0.8)
//
// Inside the service the Go runtime's memory is sampled every 10ms from
// runtime/metrics after -warmup: total less released (what GOMEMLIMIT
// bounds) and the live heap of the last collection. The table reports,
// per row, goodput (calls answered OK per second), shed calls per
// second, calls that missed their deadline, the peak and p99 of the Go
// memory and of the live heap against the limit, the share of samples
// above the limit, the share of the process's CPU the collector took,
// and the capacity the shedder held (median).
//
// What this program decides: the service, the load and the limit are
// fixed and identical for every row; the only thing that changes is the
// shedder's signal. Bounded: every run ends after warmup + duration plus
// the last deadline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/bench/internal/child"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

func main() {
	child.ServeIfAsked(serveFlag, serve)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, os.Args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// options are the program's flags.
type options struct {
	limit       int64
	buffer      int
	hold        time.Duration
	overload    float64
	target      float64
	serverProcs int
	deadline    time.Duration
	warmup      time.Duration
	duration    time.Duration
	rounds      int
	rows        []string
	seed        uint64
}

// rowNames are the rows, in the order they run each round.
var rowNames = []string{"latency", "latency+cpu", "memory"}

func parseOptions(args []string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	limitMiB := fs.Int("limit", 64, "the service's GOMEMLIMIT, MiB")
	bufKiB := fs.Int("buffer", 1024, "bytes each call allocates and holds, KiB")
	fs.DurationVar(&o.hold, "hold", 200*time.Millisecond, "how long each call holds its buffer")
	fs.Float64Var(&o.overload, "overload", 3, "offered buffers in flight over the limit")
	fs.Float64Var(&o.target, "target", 0.8, "the memory row's memory_target")
	fs.IntVar(&o.serverProcs, "server-procs", 1, "the service's GOMAXPROCS")
	fs.DurationVar(&o.deadline, "deadline", 2*time.Second, "each call's deadline")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "load before measuring (the capacity learns)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured load per row")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds of the rows, interleaved")
	rows := fs.String("rows", strings.Join(rowNames, ","), "rows to run: "+strings.Join(rowNames, ", "))
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.limit, o.buffer = int64(*limitMiB)<<20, *bufKiB<<10
	var bad []string
	if *limitMiB < 8 {
		bad = append(bad, fmt.Sprintf("-limit %d MiB must be at least 8", *limitMiB))
	}
	if *bufKiB < 4 || int64(*bufKiB)<<10 > o.limit {
		bad = append(bad, fmt.Sprintf("-buffer %d KiB must be at least 4 and at most the limit", *bufKiB))
	}
	if o.hold <= 0 || o.deadline <= o.hold {
		bad = append(bad, fmt.Sprintf("-hold %s must be positive and below -deadline %s", o.hold, o.deadline))
	}
	if !(o.overload > 0) || o.overload > 20 {
		bad = append(bad, fmt.Sprintf("-overload %v must lie in (0, 20]", o.overload))
	}
	if !(o.target > 0 && o.target <= 1) {
		bad = append(bad, fmt.Sprintf("-target %v must lie in (0, 1]", o.target))
	}
	if o.serverProcs < 1 || o.rounds < 1 || o.warmup < 0 || o.duration <= 0 {
		bad = append(bad, "-server-procs and -rounds must be at least 1, -warmup not negative, -duration positive")
	}
	for _, r := range strings.Split(*rows, ",") {
		if !slices.Contains(rowNames, r) {
			bad = append(bad, fmt.Sprintf("-rows: unknown row %q (want %s)", r, strings.Join(rowNames, ", ")))
		}
		o.rows = append(o.rows, r)
	}
	if len(bad) > 0 {
		return o, errors.New(strings.Join(bad, "; "))
	}
	return o, nil
}

// result is one row of one round.
type result struct {
	row                    string
	round                  int
	ok, shed, late, failed int64
	st                     serverStats
}

func run(ctx context.Context, args []string, out io.Writer) ([]result, error) {
	o, err := parseOptions(args, out)
	if err != nil {
		return nil, err
	}
	rate := o.overload * float64(o.limit) / (float64(o.buffer) * o.hold.Seconds())
	fmt.Fprintf(out, "memload: GOMEMLIMIT %d MiB, %d KiB held %s per call, %.0f calls/s offered (%.1fx the limit in flight), GOMAXPROCS %d, %s warmup + %s measured, %d rounds\n",
		o.limit>>20, o.buffer>>10, o.hold, rate, o.overload, o.serverProcs, o.warmup, o.duration, o.rounds)
	var results []result
	for round := 1; round <= o.rounds; round++ {
		for _, row := range o.rows {
			cfg := serverConfig{Buffer: o.buffer, Hold: o.hold, Min: 4, Max: 10_000, Warmup: o.warmup}
			switch row {
			case "latency+cpu":
				cfg.CPUTarget = 0.9
			case "memory":
				cfg.MemoryTarget = o.target
			}
			r, err := runRow(ctx, o, cfg, rate, o.seed+uint64(round))
			if err != nil {
				return results, fmt.Errorf("%s, round %d: %w", row, round, err)
			}
			r.row, r.round = row, round
			results = append(results, r)
		}
	}
	print(out, o, results)
	return results, nil
}

// runRow starts a service with cfg, offers it rate calls a second, and
// returns what the client counted and the service sampled.
func runRow(ctx context.Context, o options, cfg serverConfig, rate float64, seed uint64) (result, error) {
	c, err := startChild(ctx, cfg, o)
	if err != nil {
		return result{}, err
	}
	conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		_, _ = c.stop()
		return result{}, err
	}
	defer conn.Close()
	client := testpb.NewEchoClient(conn)
	var r result
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(seed, 0x6d656d6c6f6164))
	start := time.Now()
	end := start.Add(o.warmup + o.duration)
	next := start
	var ok, shed, late, failed atomic.Int64
	for next.Before(end) && ctx.Err() == nil {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		time.Sleep(time.Until(next))
		measured := next.Sub(start) >= o.warmup
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, o.deadline)
			defer cancel()
			_, err := client.Plain(cctx, &testpb.EchoRequest{Message: "m"})
			if !measured {
				return
			}
			switch status.Code(err) {
			case codes.OK:
				ok.Add(1)
			case codes.Unavailable:
				shed.Add(1)
			case codes.DeadlineExceeded:
				late.Add(1)
			default:
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	st, err := c.stop()
	if err != nil {
		return r, err
	}
	r.ok, r.shed, r.late, r.failed, r.st = ok.Load(), shed.Load(), late.Load(), failed.Load(), st
	return r, ctx.Err()
}

func print(out io.Writer, o options, results []result) {
	mib := func(b int64) string {
		return fmt.Sprintf("%.0f (%.0f%%)", float64(b)/(1<<20), 100*float64(b)/float64(o.limit))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tround\tgoodput/s\tshed/s\tlate\tGo mem peak MiB\tp99\tlive heap peak\tp99\tover limit\tGC CPU\tcapacity\t")
	secs := o.duration.Seconds()
	for _, r := range results {
		over := 0
		for _, m := range r.st.Mem {
			if m > r.st.Limit {
				over++
			}
		}
		overShare := 0.0
		if len(r.st.Mem) > 0 {
			overShare = 100 * float64(over) / float64(len(r.st.Mem))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%d\t%s\t%s\t%s\t%s\t%.0f%%\t%.0f%%\t%d\t\n", r.row, r.round,
			float64(r.ok)/secs, float64(r.shed)/secs, r.late+r.failed,
			mib(slices.Max(append([]int64{0}, r.st.Mem...))), mib(quantile(r.st.Mem, 0.99)),
			mib(slices.Max(append([]int64{0}, r.st.Live...))), mib(quantile(r.st.Live, 0.99)),
			overShare, 100*r.st.GCShare, quantile(r.st.Capacity, 0.5))
	}
	_ = tw.Flush()
	for _, r := range results {
		if r.st.Source != "" {
			fmt.Fprintf(out, "memory meter: %s\n", r.st.Source)
			break
		}
	}
}

// serviceProc is a running service process (package
// bench/internal/child).
type serviceProc struct{ *child.Child }

// startChild starts the service with cfg in a process of its own with
// GOMEMLIMIT and GOMAXPROCS set, and waits for its address.
func startChild(ctx context.Context, cfg serverConfig, o options) (serviceProc, error) {
	c, err := child.Start(ctx, "memload", serveFlag, cfg,
		"GOMAXPROCS="+strconv.Itoa(o.serverProcs), "GOMEMLIMIT="+strconv.FormatInt(o.limit, 10))
	return serviceProc{c}, err
}

// stop closes the service's stdin, reads its stats and waits for it,
// for at most 10s.
func (s serviceProc) stop() (serverStats, error) {
	var st serverStats
	err := s.Stop(&st)
	return st, err
}
