// Command orca shows what floodgate's load reports (guard.WithLoadReports,
// ORCA) do for a client's balancer: three replicas of one gRPC service,
// one with half the capacity of the others, driven at the same offered
// load by a grpc-go client balancing with round_robin and by one with
// weighted_round_robin reading the replicas' per-call ORCA reports.
//
// The replicas are gRPC servers on free 127.0.0.1 ports in this process,
// each behind its own guard (in process, WithLoadReports) whose shedder
// has a fixed capacity: -capacity calls in flight for two replicas,
// half of it for the third. The handler holds one of capacity worker
// slots for -service (a fixed service time, waiting for a slot if none
// is free), so the capacity is real: a replica serves at most capacity /
// service calls per second. Calls carry no priority (write: shed from
// 90% of capacity in flight).
//
// Load is open loop: arrivals at -load x the replicas' total capacity
// (2.5 x capacity / service per second), Poisson by default (-arrivals
// uniform spaces them evenly), each call with -deadline; a shed call is
// not retried. Each row is a fresh client (ClientConn) over the same
// three replicas: -warmup (not counted; weighted_round_robin's blackout
// period, -blackout, passes in it) then -duration counted, calls counted
// by when they were sent. -rounds N interleaves the rows (rr wrr rr wrr
// ...) and sums them. weighted_round_robin recomputes its weights every
// -weight-update (grpc-go's least, 100ms); its out-of-band mode is not
// run, since grpc-go's ORCA service reports at most every 30s.
//
// An arrival the sender reaches more than maxLate after its time (the
// process was descheduled: the VM's other work, a GC) is skipped and
// counted as late, not sent with the others it fell behind with: a
// stall would otherwise turn into a burst of every call it held up, the
// whole fleet over capacity at once, which is the sender's artefact, not
// the offered load. The rows are compared on what was sent.
//
// The table: calls sent, late (skipped, not sent), shed (UNAVAILABLE
// from a shedder), their share,
// other errors (deadline), and each replica's share of the calls and of
// the sheds; then the ratio of the two rows' sheds, and the load each
// replica reported last (guard.LoadReport).
//
// What this program decides: the replicas, the load and the client are
// identical for both rows but for the balancer. Bounded: every row ends
// after warmup + duration plus the last deadline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	_, err := run(ctx, os.Args, os.Stdout)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "orca:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	capacity               int
	service, deadline      time.Duration
	load                   float64
	poisson                bool
	warmup, duration       time.Duration
	rounds                 int
	blackout, weightUpdate time.Duration
	only                   map[string]bool
	seed                   uint64
	// stall, every stallEvery, holds the sender as if the process were
	// descheduled (-stall, for the tests of maxLate)
	stall, stallEvery time.Duration
}

func parseOptions(args []string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	fs.IntVar(&o.capacity, "capacity", 60, "calls in flight a full replica holds (its shedder's capacity and its worker slots); the third holds half")
	fs.DurationVar(&o.service, "service", 100*time.Millisecond, "the handler's fixed service time")
	fs.Float64Var(&o.load, "load", 0.75, "offered load, a share of the three replicas' total capacity")
	arrivals := fs.String("arrivals", "poisson", "arrival process: poisson or uniform")
	fs.DurationVar(&o.deadline, "deadline", time.Second, "each call's deadline")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "per row, not counted")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "per row, counted")
	fs.IntVar(&o.rounds, "rounds", 2, "rows interleaved this many times, summed")
	fs.DurationVar(&o.blackout, "blackout", 500*time.Millisecond, "weighted_round_robin's blackoutPeriod")
	fs.DurationVar(&o.weightUpdate, "weight-update", 100*time.Millisecond, "weighted_round_robin's weightUpdatePeriod (grpc-go's least: 100ms)")
	fs.DurationVar(&o.stall, "stall", 0, "hold the sender this long every -stall-every, as a descheduled process is (late arrivals are skipped, not sent in a burst); 0: never")
	fs.DurationVar(&o.stallEvery, "stall-every", 700*time.Millisecond, "see -stall")
	only := fs.String("only", "", "comma-separated rows to run (rr, wrr); all by default")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrival times")
	short := fs.Bool("short", false, "one round, 1s warm-up, 1s counted (what the tests run)")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *short {
		o.rounds, o.warmup, o.duration = 1, time.Second, time.Second
	}
	var errs []error
	if o.capacity < 2 {
		errs = append(errs, fmt.Errorf("-capacity %d: want 2 or more (the third replica holds half)", o.capacity))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"-service", o.service}, {"-deadline", o.deadline}, {"-duration", o.duration}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %v: want a positive duration", d.name, d.v))
		}
	}
	if o.warmup < 0 || o.blackout < 0 || o.weightUpdate < 0 {
		errs = append(errs, errors.New("-warmup, -blackout and -weight-update must not be negative"))
	}
	if !(o.load > 0 && o.load <= 10) {
		errs = append(errs, fmt.Errorf("-load %v: want a share in (0, 10]", o.load))
	}
	if o.rounds < 1 {
		errs = append(errs, fmt.Errorf("-rounds %d: want 1 or more", o.rounds))
	}
	switch *arrivals {
	case "poisson":
		o.poisson = true
	case "uniform":
	default:
		errs = append(errs, fmt.Errorf("-arrivals %q: want poisson or uniform", *arrivals))
	}
	if *only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			if n != "rr" && n != "wrr" {
				errs = append(errs, fmt.Errorf("-only %q: rows are rr and wrr", n))
			}
			o.only[n] = true
		}
	}
	return o, errors.Join(errs...)
}

// replica is one server of the service.
type replica struct {
	name     string
	capacity int
	addr     string
	g        *guard.Guard
	srv      *grpc.Server
}

// worker is the service's handler: capacity slots, each held for a
// fixed service time.
type worker struct {
	testpb.UnimplementedEchoServer
	slots   chan struct{}
	service time.Duration
}

func (w *worker) Plain(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-w.slots }()
	t := time.NewTimer(w.service)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

func startReplica(name string, capacity int, service time.Duration) (*replica, error) {
	g, err := guard.New(context.Background(), guard.WithInProcess(), guard.WithLoadReports(),
		guard.WithPolicy(fmt.Appendf(nil, "rules: []\nshedder: {capacity: %d}\n", capacity)))
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(g.ServerOptions()...)
	testpb.RegisterEchoServer(srv, &worker{slots: make(chan struct{}, capacity), service: service})
	if err := g.RegisterLoadReports(srv); err != nil {
		g.Close(context.Background())
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		g.Close(context.Background())
		return nil, err
	}
	go srv.Serve(ln) //nolint:errcheck // ends at Stop
	return &replica{name: name, capacity: capacity, addr: ln.Addr().String(), g: g, srv: srv}, nil
}

func (r *replica) stop() {
	r.srv.Stop()
	r.g.Close(context.Background())
}

// counts are one row's calls, by when they were sent.
type counts struct {
	sent, late, shed, other int64
	perSent, perShed        [3]int64
}

// maxLate is how far behind its time an arrival may be sent; a later one
// is skipped (see the package doc).
const maxLate = 10 * time.Millisecond

func (c *counts) add(o *counts) {
	c.sent += o.sent
	c.late += o.late
	c.shed += o.shed
	c.other += o.other
	for i := range c.perSent {
		c.perSent[i] += o.perSent[i]
		c.perShed[i] += o.perShed[i]
	}
}

// balancers are the rows.
var balancers = []string{"rr", "wrr"}

func serviceConfig(o options, row string) string {
	if row == "rr" {
		return `{"loadBalancingConfig": [{"round_robin": {}}]}`
	}
	return fmt.Sprintf(`{"loadBalancingConfig": [{"weighted_round_robin": {"blackoutPeriod": "%gs", "weightUpdatePeriod": "%gs"}}]}`,
		o.blackout.Seconds(), o.weightUpdate.Seconds())
}

func run(ctx context.Context, args []string, out io.Writer) (map[string]*counts, error) {
	o, err := parseOptions(args, out)
	if err != nil {
		return nil, err
	}
	caps := []int{o.capacity, o.capacity, o.capacity / 2}
	total := float64(caps[0]+caps[1]+caps[2]) / o.service.Seconds()
	rate := o.load * total
	harness.WriteHeader(out, args, []string{
		fmt.Sprintf("replicas: 3 gRPC servers in this process, shedder capacity and worker slots %d/%d/%d, service time %v: %.0f calls/s in all",
			caps[0], caps[1], caps[2], o.service, total),
		fmt.Sprintf("load: %s arrivals at %.0f calls/s (%.0f%% of capacity), deadline %v; weighted_round_robin: per-call ORCA, blackout %v, weight update %v",
			map[bool]string{true: "Poisson", false: "evenly spaced"}[o.poisson], rate, 100*o.load, o.deadline, o.blackout, o.weightUpdate),
	}, []string{"google.golang.org/grpc"})
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	for i, c := range caps {
		r, err := startReplica(fmt.Sprintf("r%d", i+1), c, o.service)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
	}
	all := map[string]*counts{}
	var lastLoads = map[string][]guard.LoadReport{}
	seed := o.seed
	for round := range o.rounds {
		for _, row := range balancers {
			if o.only != nil && !o.only[row] {
				continue
			}
			seed++
			c, err := runRow(ctx, o, row, reps, rate, seed)
			if err != nil {
				return all, fmt.Errorf("round %d, %s: %w", round+1, row, err)
			}
			if all[row] == nil {
				all[row] = &counts{}
			}
			all[row].add(c)
			var loads []guard.LoadReport
			for _, r := range reps {
				loads = append(loads, r.g.LoadReport())
			}
			lastLoads[row] = loads
		}
	}
	printTable(out, o, reps, all, lastLoads)
	return all, nil
}

// runRow sends the load through a fresh client balancing with row, and
// waits for the replicas to drain.
func runRow(ctx context.Context, o options, row string, reps []*replica, rate float64, seed uint64) (*counts, error) {
	rb := manual.NewBuilderWithScheme("orca" + row)
	var addrs []resolver.Address
	index := map[string]int{}
	for i, r := range reps {
		addrs = append(addrs, resolver.Address{Addr: r.addr})
		index[r.addr] = i
	}
	rb.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient(rb.Scheme()+":///service",
		grpc.WithResolvers(rb),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig(o, row)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := testpb.NewEchoClient(conn)

	rng := rand.New(rand.NewPCG(seed, 0x6f726361))
	var c counts
	var mu sync.Mutex
	var wg sync.WaitGroup
	var unknown atomic.Int64
	start := time.Now()
	counted, end := start.Add(o.warmup), start.Add(o.warmup+o.duration)
	next, stalled := start, start
	for {
		if o.stall > 0 && time.Since(stalled) >= o.stallEvery {
			time.Sleep(o.stall)
			stalled = time.Now()
		}
		gap := 1 / rate
		if o.poisson {
			gap = rng.ExpFloat64() / rate
		}
		next = next.Add(time.Duration(gap * float64(time.Second)))
		if !next.Before(end) {
			break
		}
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return nil, ctx.Err()
			}
		}
		count := !next.Before(counted)
		if time.Since(next) > maxLate {
			if count {
				mu.Lock()
				c.late++
				mu.Unlock()
			}
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, o.deadline)
			defer cancel()
			var p peer.Peer
			_, err := client.Plain(cctx, &testpb.EchoRequest{Message: "x"}, grpc.Peer(&p))
			if !count {
				return
			}
			i, ok := -1, false
			if p.Addr != nil {
				i, ok = index[p.Addr.String()]
			}
			mu.Lock()
			defer mu.Unlock()
			c.sent++
			if ok {
				c.perSent[i]++
			} else {
				unknown.Add(1)
			}
			switch status.Code(err) {
			case codes.OK:
			case codes.Unavailable:
				c.shed++
				if ok {
					c.perShed[i]++
				}
			default:
				c.other++
			}
		})
	}
	wg.Wait()
	if n := unknown.Load(); n > 0 {
		return nil, fmt.Errorf("%d calls reached no known replica", n)
	}
	// The replicas drain (their shedders at 0 in flight) before the next
	// row, so no row inherits the last one's calls.
	for deadline := time.Now().Add(5 * time.Second); ; {
		busy := int64(0)
		for _, r := range reps {
			busy += r.g.Shedder().InFlight()
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("replicas still hold %d calls 5s after the row", busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &c, nil
}

func printTable(out io.Writer, o options, reps []*replica, all map[string]*counts, loads map[string][]guard.LoadReport) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "balancer\tsent\tlate\tshed\tshed %%\tother errors\tcalls r1/r2/r3 %%\tshed r1/r2/r3\tlast report r1/r2/r3 (utilization, qps)\t\n")
	for _, row := range balancers {
		c := all[row]
		if c == nil {
			continue
		}
		name := map[string]string{"rr": "round_robin", "wrr": "weighted_round_robin+ORCA"}[row]
		var share, rep []string
		for i := range reps {
			share = append(share, fmt.Sprintf("%.0f", 100*float64(c.perSent[i])/float64(max(c.sent, 1))))
			l := loads[row][i]
			rep = append(rep, fmt.Sprintf("%.2f %.0f", l.Utilization, l.QPS))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%d\t%s\t%d/%d/%d\t%s\t\n", name, c.sent, c.late, c.shed,
			100*float64(c.shed)/float64(max(c.sent, 1)), c.other, strings.Join(share, "/"),
			c.perShed[0], c.perShed[1], c.perShed[2], strings.Join(rep, ", "))
	}
	tw.Flush()
	if rr, wrr := all["rr"], all["wrr"]; rr != nil && wrr != nil {
		if rr.shed == 0 {
			fmt.Fprintln(out, "\nround_robin shed nothing: raise -load for a comparison")
			return
		}
		fmt.Fprintf(out, "\nshed with weighted_round_robin+ORCA / shed with round_robin = %d/%d = %.3f\n",
			wrr.shed, rr.shed, float64(wrr.shed)/float64(rr.shed))
	}
}
