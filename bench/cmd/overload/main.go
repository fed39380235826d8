// Command overload drives a gRPC service past its capacity with mixed
// priorities and compares how floodgate's load shedder protects it with a
// fixed capacity (swept over powers of two, so that rows 2x too high and 2x
// too low of the best one are in the table) and with an adaptive capacity
// (shedder.WithAdaptiveCapacity), which needs no number.
//
// Two services (-variant):
//
//	cpu  the handler burns -cpu-work of CPU (SHA-256 rounds calibrated once,
//	     by the variant's first service, and given to every later one);
//	     the service runs in a process of its own with
//	     GOMAXPROCS=-server-procs, so its capacity is that many cores
//	dep  the handler waits on a slow dependency: at most -dep-slots calls
//	     at once, -dep-work each, the rest queued (a connection pool)
//
// For each variant the program first measures the service's throughput
// without a shedder (closed loop, enough calls in flight to saturate it),
// mu. Load is then open loop: Poisson arrivals at -overload x mu (3x by
// default), 10% critical, 30% write, 30% read, 30% test (priority in the
// x-priority metadata the server trusts), each call with a -deadline. A
// shed call is not retried. The unloaded baseline is the critical arrivals
// alone (0.3 mu, so the service is 30% busy), run every round next to the
// rows: the p99 of its calls pooled over the rounds, taken exactly as a
// row's is, is what "critical p99 <= 2x unloaded" compares with.
//
// Every run is -warmup (not measured: an adaptive capacity starts at its
// Min and learns) and then -duration measured; calls are counted by when
// they arrived. The table reports goodput (calls answered OK per second),
// the share of critical calls served, their p99 and p99 over the unloaded
// one, how many calls missed their deadline, and for the adaptive rows the
// capacity it held (median over the measured phase, with min and max).
//
// What this program decides: the service, the mix and the load are fixed
// and identical for every row of a variant, each row a fresh service
// process; the only thing that changes is the shedder's capacity. Bounded:
// every run ends after warmup + duration plus the last deadline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bench/internal/child"
	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// priorityHeader is the metadata key the service takes priorities from.
const priorityHeader = "x-priority"

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
	variants    []string
	cpuWork     time.Duration
	cpuWait     time.Duration
	depWork     time.Duration
	depSlots    int
	serverProcs int
	overload    float64
	deadline    time.Duration
	warmup      time.Duration
	duration    time.Duration
	fixed       []int64 // nil: a sweep around the Little's law estimate
	seed        uint64
	rounds      int
	markdown    bool
	trace       bool
}

func parseOptions(args []string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	variants := fs.String("variant", "cpu,dep", "services to drive: cpu, dep or both")
	fs.DurationVar(&o.cpuWork, "cpu-work", 2*time.Millisecond, "cpu: CPU burnt per call")
	fs.DurationVar(&o.cpuWait, "cpu-wait", 8*time.Millisecond, "cpu: then waited per call, on I/O that is never the bottleneck")
	fs.DurationVar(&o.depWork, "dep-work", 10*time.Millisecond, "dep: the dependency's time per call")
	fs.IntVar(&o.depSlots, "dep-slots", 16, "dep: calls the dependency serves at once")
	fs.IntVar(&o.serverProcs, "server-procs", 1, "GOMAXPROCS of the service's process")
	fs.Float64Var(&o.overload, "overload", 3, "offered load as a multiple of the service's throughput")
	fs.DurationVar(&o.deadline, "deadline", 500*time.Millisecond, "deadline of every call")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "unmeasured start of every run")
	fs.DurationVar(&o.duration, "duration", 6*time.Second, "measured part of every run")
	fixed := fs.String("fixed", "", "fixed capacities to run, comma separated (default: powers of two around the Little's law estimate)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals (each round adds its number)")
	fs.IntVar(&o.rounds, "rounds", 2, "times every row is measured, interleaved (row 1, row 2, ..., row 1, ...), its counts added up")
	fs.BoolVar(&o.markdown, "markdown", false, "print the tables as Markdown too")
	fs.BoolVar(&o.trace, "trace", false, "print the adaptive capacity every 100ms")
	short := fs.Bool("short", false, "1s warm-up and 2s runs, one round, and three fixed capacities (what the tests run)")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	for _, v := range strings.Split(*variants, ",") {
		switch v = strings.TrimSpace(v); v {
		case "cpu", "dep":
			o.variants = append(o.variants, v)
		default:
			return o, fmt.Errorf("-variant: unknown variant %q (want cpu or dep)", v)
		}
	}
	if *fixed != "" {
		for _, f := range strings.Split(*fixed, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || n < 1 {
				return o, fmt.Errorf("-fixed: %q is not a capacity >= 1", f)
			}
			o.fixed = append(o.fixed, n)
		}
	}
	if *short {
		o.warmup, o.duration, o.rounds = time.Second, 2*time.Second, 1
	}
	switch {
	case o.cpuWork <= 0 || o.depWork <= 0 || o.cpuWait < 0:
		return o, errors.New("-cpu-work and -dep-work must be positive, -cpu-wait not negative")
	case o.depSlots < 1 || o.serverProcs < 1:
		return o, errors.New("-dep-slots and -server-procs must be at least 1")
	case !(o.overload >= 1):
		return o, errors.New("-overload must be at least 1")
	case o.deadline <= 0 || o.warmup < 0 || o.duration <= 0:
		return o, errors.New("-deadline and -duration must be positive, -warmup not negative")
	case o.rounds < 1:
		return o, errors.New("-rounds must be at least 1")
	}
	if *short && o.fixed == nil {
		o.fixed = []int64{0} // three around the estimate, see sweep
	}
	return o, nil
}

// mix is the share of arrivals of each priority.
var mix = []struct {
	p     floodgate.Priority
	share float64
}{{floodgate.PriorityCritical, 0.1}, {floodgate.PriorityWrite, 0.3}, {floodgate.PriorityRead, 0.3}, {floodgate.PriorityTest, 0.3}}

// result is one run of a variant.
type result struct {
	name       string
	capacity   string // what the Capacity column shows
	seconds    float64
	goodOK     int // calls answered OK that ended inside the measured phase
	class      [floodgate.NumPriorities]classResult
	server     serverStats
	capSamples []int64 // adaptive: the capacity every 100ms of the measured phases
	fixed      int64   // the fixed capacity, 0 for adaptive
}

// add adds the counts of another round of the same row.
func (r *result) add(o *result) {
	r.seconds += o.seconds
	r.goodOK += o.goodOK
	for p := range r.class {
		c, oc := &r.class[p], &o.class[p]
		c.arrived += oc.arrived
		c.ok += oc.ok
		c.shed += oc.shed
		c.late += oc.late
		c.other += oc.other
		c.lat.Merge(&oc.lat)
	}
	r.capSamples = append(r.capSamples, o.capSamples...)
	r.server.Probes += o.server.Probes
}

type classResult struct {
	arrived, ok, shed, late, other int
	lat                            harness.Histogram // of the calls answered OK
}

// goodput is the calls answered OK per second of the measured phases,
// counted by when they ended.
func (r *result) goodput() float64 { return float64(r.goodOK) / r.seconds }

func (r *result) late() int {
	n := 0
	for _, c := range r.class {
		n += c.late
	}
	return n
}

func (r *result) critical() *classResult { return &r.class[floodgate.PriorityCritical] }

func (c *classResult) servedShare() float64 {
	if c.arrived == 0 {
		return 0
	}
	return float64(c.ok) / float64(c.arrived)
}

func run(ctx context.Context, args []string, out io.Writer) (map[string][]*result, error) {
	o, err := parseOptions(args, out)
	if err != nil {
		return nil, err
	}
	runtime.GOMAXPROCS(max(1, runtime.NumCPU()-o.serverProcs))
	harness.WriteHeader(out, args, []string{
		fmt.Sprintf("service: its own process, GOMAXPROCS=%d; load generator GOMAXPROCS=%d", o.serverProcs, runtime.GOMAXPROCS(0)),
	}, []string{"google.golang.org/grpc"})
	all := map[string][]*result{}
	for _, v := range o.variants {
		rs, err := runVariant(ctx, o, v, out)
		if err != nil {
			return all, err
		}
		all[v] = rs
	}
	return all, nil
}

// row is one configuration of the shedder that a variant runs.
type row struct {
	name      string
	fixed     int64
	cpuTarget float64 // adaptive rows
}

// runVariant measures mu, then for every round the unloaded baseline and
// every row, and prints the variant's table.
func runVariant(ctx context.Context, o options, variant string, out io.Writer) ([]*result, error) {
	base := serverConfig{Variant: variant, Work: o.cpuWork, Wait: o.cpuWait, Slots: o.depSlots}
	if variant == "dep" {
		base.Work = o.depWork
	}
	fmt.Fprintf(out, "\n== variant %s: %s\n", variant, describe(o, variant))
	mu, unloadedMean, perMs, err := saturate(ctx, base, o)
	if err != nil {
		return nil, err
	}
	base.BurnPerMs = perMs
	little := mu * unloadedMean.Seconds()
	offered := o.overload * mu
	fmt.Fprintf(out, "throughput without a shedder mu = %.0f/s, unloaded latency %s: Little's law in flight %.1f; offered %.0f/s (%.1fx), critical %.0f/s; burn rounds per ms %d\n",
		mu, unloadedMean.Round(10*time.Microsecond), little, offered, o.overload, 0.1*offered, perMs)

	var rows []row
	for _, c := range sweep(o.fixed, little) {
		rows = append(rows, row{name: fmt.Sprintf("fixed %d", c), fixed: c})
	}
	rows = append(rows, row{name: "adaptive"})
	if variant == "cpu" {
		rows = append(rows, row{name: "adaptive + cpu 0.9", cpuTarget: 0.9})
	}
	results := make([]*result, len(rows))
	var baseline harness.Histogram
	for round := 1; round <= o.rounds; round++ {
		seed := o.seed + uint64(round)
		// The unloaded baseline: critical arrivals alone, measured every
		// round between the same rows and pooled over the rounds exactly
		// as every row's calls are, so that both sides of the ratio are
		// the p99 of as many calls taken the same way (the least of the
		// rounds' p99s would set the quietest moment of a shared machine
		// against every moment of the loaded rows).
		b, err := drive(ctx, base, o, 0.1*offered, true, seed)
		if err != nil {
			return nil, err
		}
		p99 := b.critical().lat.Quantile(0.99)
		baseline.Merge(&b.critical().lat)
		fmt.Fprintf(out, "round %d/%d: unloaded critical p99 %s (p50 %s), %d calls\n", round, o.rounds, ms(p99), ms(b.critical().lat.Quantile(0.5)), b.critical().ok)
		for i, rw := range rows {
			cfg := base
			if rw.fixed > 0 {
				cfg.Capacity = rw.fixed
			} else {
				cfg.Capacity, cfg.Adaptive, cfg.Min, cfg.Max, cfg.CPUTarget = 1, true, 1, 10_000, rw.cpuTarget
			}
			r, err := drive(ctx, cfg, o, offered, false, seed)
			if err != nil {
				return nil, err
			}
			if rw.fixed == 0 {
				skip := min(len(r.server.Capacity), int(o.warmup/(100*time.Millisecond)))
				r.capSamples = r.server.Capacity[skip:]
				if o.trace {
					fmt.Fprintf(out, "  %s capacity every 100ms: %v (%d probe samples)\n", rw.name, r.server.Capacity, r.server.Probes)
					for _, w := range r.server.Windows {
						fmt.Fprintln(out, "    "+w)
					}
				}
			}
			r.name = rw.name
			progress(out, r, p99)
			if results[i] == nil {
				results[i] = r
			} else {
				results[i].add(r)
			}
		}
	}
	unloaded := baseline.Quantile(0.99)
	for i, rw := range rows {
		r := results[i]
		r.name, r.fixed = rw.name, rw.fixed
		r.capacity = strconv.FormatInt(rw.fixed, 10)
		if rw.fixed == 0 {
			r.capacity = adaptiveCapacity(r.capSamples)
		}
	}
	label(results, unloaded)
	fmt.Fprintf(out, "\n%s, %d round(s) of %s measured each (after %s of warm-up); unloaded critical p99 %s\n", variant, o.rounds, o.duration, o.warmup, ms(unloaded))
	writeTable(out, results, unloaded, false)
	if o.markdown {
		fmt.Fprintln(out)
		writeTable(out, results, unloaded, true)
	}
	verdict(out, results, unloaded)
	return results, nil
}

func describe(o options, variant string) string {
	if variant == "cpu" {
		return fmt.Sprintf("the handler burns %s of CPU, then waits %s on I/O; the service has %d core(s), so its CPU saturates first", o.cpuWork, o.cpuWait, o.serverProcs)
	}
	return fmt.Sprintf("the handler waits on a dependency serving %d calls at once, %s each", o.depSlots, o.depWork)
}

// sweep returns the fixed capacities to run: the given ones, or powers of
// two from a quarter of the Little's law estimate to 16 times it (with
// fixed = {0}, -short: three, from half to twice).
func sweep(fixed []int64, little float64) []int64 {
	if len(fixed) > 0 && fixed[0] != 0 {
		return fixed
	}
	lo, hi := little/4, little*16
	if len(fixed) == 1 {
		lo, hi = little/2, little*2
	}
	var out []int64
	for c := int64(1); float64(c) <= math.Max(hi, 2); c *= 2 {
		if float64(c)*2 > lo {
			out = append(out, c)
		}
	}
	return out
}

// meets reports whether r meets the targets for critical calls:
// at least 99.9% served, p99 at most twice the unloaded one.
func meets(r *result, unloaded time.Duration) bool {
	cr := r.critical()
	return cr.servedShare() >= 0.999 && ratio(cr.lat.Quantile(0.99), unloaded) <= 2
}

// bestFixed returns the fixed row a hand-tuner would pick: the highest
// goodput among those that meet the critical targets, or, when none does,
// the highest goodput; and the highest goodput of all.
func bestFixed(rs []*result, unloaded time.Duration) (tuned, top *result) {
	for _, r := range rs {
		if r.fixed == 0 {
			continue
		}
		if top == nil || r.goodput() > top.goodput() {
			top = r
		}
		if meets(r, unloaded) && (tuned == nil || r.goodput() > tuned.goodput()) {
			tuned = r
		}
	}
	if tuned == nil {
		tuned = top
	}
	return tuned, top
}

// label names the best hand-tuned fixed capacity and its neighbours.
func label(rs []*result, unloaded time.Duration) {
	best, top := bestFixed(rs, unloaded)
	if best == nil {
		return
	}
	best.name += " (best fixed)"
	if top != best {
		top.name += " (most goodput)"
	}
	for _, r := range rs {
		switch r.fixed {
		case 2 * best.fixed:
			r.name += " (2x too high)"
		case best.fixed / 2:
			if best.fixed%2 == 0 {
				r.name += " (2x too low)"
			}
		}
	}
}

// adaptiveCapacity shows samples: the median (min-max).
func adaptiveCapacity(samples []int64) string {
	c := slices.Clone(samples)
	if len(c) == 0 {
		return "-"
	}
	slices.Sort(c)
	return fmt.Sprintf("%d (%d-%d)", c[len(c)/2], c[0], c[len(c)-1])
}

func progress(out io.Writer, r *result, unloaded time.Duration) {
	fmt.Fprintf(out, "  %-28s goodput %6.0f/s  critical served %6.2f%%  critical p99 %s (%.2fx, p50 %s, p90 %s)  late %d\n",
		r.name, r.goodput(), 100*r.critical().servedShare(), ms(r.critical().lat.Quantile(0.99)),
		ratio(r.critical().lat.Quantile(0.99), unloaded), ms(r.critical().lat.Quantile(0.5)), ms(r.critical().lat.Quantile(0.9)), r.late())
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms" }

func writeTable(out io.Writer, rs []*result, unloaded time.Duration, markdown bool) {
	head := []string{"capacity", "shedder capacity", "goodput/s", "critical served", "critical p99", "x unloaded", "late", "write served", "read served", "test served"}
	var rows [][]string
	for _, r := range rs {
		cr := r.critical()
		rows = append(rows, []string{
			r.name, r.capacity,
			strconv.FormatFloat(r.goodput(), 'f', 0, 64),
			strconv.FormatFloat(100*cr.servedShare(), 'f', 2, 64) + "%",
			ms(cr.lat.Quantile(0.99)),
			strconv.FormatFloat(ratio(cr.lat.Quantile(0.99), unloaded), 'f', 2, 64),
			strconv.Itoa(r.late()),
			strconv.FormatFloat(100*r.class[floodgate.PriorityWrite].servedShare(), 'f', 1, 64) + "%",
			strconv.FormatFloat(100*r.class[floodgate.PriorityRead].servedShare(), 'f', 1, 64) + "%",
			strconv.FormatFloat(100*r.class[floodgate.PriorityTest].servedShare(), 'f', 1, 64) + "%",
		})
	}
	if markdown {
		fmt.Fprintln(out, "| "+strings.Join(head, " | ")+" |")
		fmt.Fprintln(out, "|"+strings.Repeat(" --- |", len(head)))
		for _, r := range rows {
			fmt.Fprintln(out, "| "+strings.Join(r, " | ")+" |")
		}
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// verdict prints the targets against this run.
func verdict(out io.Writer, rs []*result, unloaded time.Duration) {
	best, top := bestFixed(rs, unloaded)
	if best == nil {
		return
	}
	if meets(best, unloaded) {
		fmt.Fprintf(out, "best fixed: the most goodput among the fixed capacities that meet the critical targets (%s)\n", best.name)
	} else {
		fmt.Fprintf(out, "best fixed: no fixed capacity met the critical targets; the most goodput (%s)\n", best.name)
	}
	for _, r := range rs {
		if r.fixed > 0 {
			continue
		}
		cr := r.critical()
		fmt.Fprintf(out, "%s: goodput %.1f%% of the best fixed (target >= 90%%) and %.1f%% of the most of any fixed, critical served %.2f%% (target >= 99.9%%), critical p99 %.2fx unloaded (target <= 2)\n",
			r.name, 100*r.goodput()/best.goodput(), 100*r.goodput()/top.goodput(), 100*cr.servedShare(), ratio(cr.lat.Quantile(0.99), unloaded))
	}
}

// saturate runs the service without a shedder under a closed loop with
// enough calls in flight to saturate it, and returns its throughput, the
// mean latency of a single call in flight (the unloaded latency), and the
// burn rounds of a millisecond it calibrated (cpu), which every later
// service of the variant is given.
func saturate(ctx context.Context, cfg serverConfig, o options) (mu float64, lat time.Duration, perMs int, err error) {
	ch, err := startChild(ctx, cfg, o.serverProcs)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		st, serr := ch.stop()
		perMs = st.BurnPerMs
		if err == nil && serr != nil {
			err = serr
		}
	}()
	cc, err := dial(ch.Addr)
	if err != nil {
		return 0, 0, 0, err
	}
	defer cc.Close()
	c := testpb.NewEchoClient(cc)
	closed := func(n int, d time.Duration) (int64, time.Duration) {
		var calls atomic.Int64
		var total atomic.Int64
		end := time.Now().Add(d)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for time.Now().Before(end) && ctx.Err() == nil {
					t0 := time.Now()
					cctx, cancel := context.WithTimeout(ctx, o.deadline)
					_, err := c.Plain(cctx, &testpb.EchoRequest{})
					cancel()
					if err == nil {
						calls.Add(1)
						total.Add(int64(time.Since(t0)))
					}
				}
			})
		}
		wg.Wait()
		if calls.Load() == 0 {
			return 0, 0
		}
		return calls.Load(), time.Duration(total.Load() / calls.Load())
	}
	measure := min(2*time.Second, o.duration)
	closed(1, measure/4) // warm-up
	_, lat = closed(1, measure/2)
	inflight := 4 * o.serverProcs * int(1+(cfg.Wait+cfg.Work-1)/cfg.Work)
	if cfg.Variant == "dep" {
		inflight = 2 * cfg.Slots
	}
	n, _ := closed(inflight, measure)
	if n == 0 || ctx.Err() != nil {
		return 0, 0, 0, fmt.Errorf("overload: the service answered nothing while saturated (%v)", ctx.Err())
	}
	return float64(n) / measure.Seconds(), lat, 0, nil
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// drive starts a service with cfg and offers it Poisson arrivals at rate
// per second of the mix (critical only when criticalOnly) for warmup +
// duration; it returns what the calls that arrived after the warm-up met.
func drive(ctx context.Context, cfg serverConfig, o options, rate float64, criticalOnly bool, seed uint64) (*result, error) {
	ch, err := startChild(ctx, cfg, o.serverProcs)
	if err != nil {
		return nil, err
	}
	cc, err := dial(ch.Addr)
	if err != nil {
		_, _ = ch.stop()
		return nil, err
	}
	c := testpb.NewEchoClient(cc)
	var mds [floodgate.NumPriorities]metadata.MD
	for _, m := range mix {
		mds[m.p] = metadata.Pairs(priorityHeader, m.p.String())
	}
	// Connect before the clock starts.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, _ = c.Plain(metadata.NewOutgoingContext(wctx, mds[floodgate.PriorityCritical]), &testpb.EchoRequest{})
	cancel()

	var (
		mu  sync.Mutex
		res = &result{seconds: o.duration.Seconds()}
		wg  sync.WaitGroup
		rng = rand.New(rand.NewPCG(seed, 0x6f766c64))
	)
	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.duration)
	next := start
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		for !next.After(now) {
			p := floodgate.PriorityCritical
			if !criticalOnly {
				u := rng.Float64()
				for _, m := range mix {
					if u < m.share {
						p = m.p
						break
					}
					u -= m.share
				}
			}
			measured := !next.Before(measureFrom)
			wg.Go(func() {
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, mds[p]), o.deadline)
				_, err := c.Plain(cctx, &testpb.EchoRequest{})
				cancel()
				endAt := time.Now()
				lat := endAt.Sub(t0)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && !endAt.Before(measureFrom) && endAt.Before(end) {
					res.goodOK++
				}
				if !measured {
					return
				}
				cr := &res.class[p]
				cr.arrived++
				switch status.Code(err) {
				case codes.OK:
					cr.ok++
					cr.lat.Record(lat)
				case codes.Unavailable:
					cr.shed++
				case codes.DeadlineExceeded:
					cr.late++
				default:
					cr.other++
				}
			})
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
		time.Sleep(min(time.Until(next), time.Millisecond))
	}
	wg.Wait()
	_ = cc.Close()
	st, err := ch.stop()
	res.server = st
	if err != nil {
		return res, err
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}
