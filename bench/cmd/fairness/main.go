// Command fairness measures what one tenant's surge takes from the other
// tenants of the same priority: -tenants tenants share a service, each
// with an equal share of its capacity; all but one offer -quiet times
// their share and the noisy one -noisy times it (open loop, -arrivals
// poisson or paced), every call a read, for -duration. Served is the
// calls a stage admitted; a tenant's share is the capacity over the
// tenants.
//
// Rows, interleaved over -rounds, each a fresh stage:
//
//	shedder        a shedder.Shedder of capacity -capacity (reads shed from
//	               80 % of it): the reads' room is 0.8 x capacity in
//	               flight, each call holds its slot -work, so the capacity
//	               is 0.8 x capacity / work calls per second
//	shedder-fair   the same with Config.Fairness by tenant
//	queue          a concurrency.Limiter of -capacity slots whose requests
//	               wait up to -max for one (FIFO): capacity / work calls
//	               per second
//	queue-fair     the same with Wait.Fairness by tenant
//
//	cd bench && go run ./cmd/fairness
//	cd bench && go run ./cmd/fairness -arrivals paced -noisy 10
//
// CPU µs/call is the process's CPU time (getrusage) over the whole phase,
// warm-up included, per call offered in it: the load generator's, the
// sleeping service's and the stage's together, so only the difference
// between a row and its fair twin is the fairness's.
//
// What this program decides: the service, the load and the tenants are
// the same for every row; only the stage and its fairness change.
// Everything runs in one process (the service sleeps; no CPU is the
// bottleneck), bounded by -duration plus -max per row and round.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
)

type options struct {
	capacity         int
	tenants          int
	work, max        time.Duration
	duration, warmup time.Duration
	quiet, noisy     float64
	rounds           int
	arrivals         string
	seed             uint64
	rows             string
}

func main() {
	if err := run(os.Args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func parse(args []string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	fs.IntVar(&o.capacity, "capacity", 100, "the shedder's capacity, and the concurrency limiter's slots")
	fs.IntVar(&o.tenants, "tenants", 5, "tenants, one of them noisy (at least 2)")
	fs.DurationVar(&o.work, "work", 50*time.Millisecond, "how long each call holds its slot")
	fs.DurationVar(&o.max, "max", 100*time.Millisecond, "the longest a request waits for a slot (queue rows)")
	fs.Float64Var(&o.quiet, "quiet", 1, "what each quiet tenant offers, in shares")
	fs.Float64Var(&o.noisy, "noisy", 10, "what the noisy tenant offers, in shares")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per row and round")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each measured phase")
	fs.IntVar(&o.rounds, "rounds", 2, "interleaved rounds")
	fs.StringVar(&o.arrivals, "arrivals", "poisson", "poisson (exponential gaps) or paced (even gaps)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals")
	fs.StringVar(&o.rows, "rows", "all", "all, shedder (its two rows) or queue (its two)")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	switch {
	case o.capacity < 1 || o.tenants < 2:
		return o, fmt.Errorf("-capacity must be at least 1 and -tenants at least 2")
	case o.work <= 0 || o.max <= 0 || o.duration <= 0 || o.warmup < 0 || o.rounds < 1:
		return o, fmt.Errorf("-work, -max and -duration must be positive, -warmup not negative, -rounds at least 1")
	case !(o.quiet > 0) || !(o.noisy > 0):
		return o, fmt.Errorf("-quiet and -noisy must be positive")
	case o.arrivals != "poisson" && o.arrivals != "paced":
		return o, fmt.Errorf("-arrivals %q: want poisson or paced", o.arrivals)
	case o.rows != "all" && o.rows != "shedder" && o.rows != "queue":
		return o, fmt.Errorf("-rows %q: want all, shedder or queue", o.rows)
	}
	return o, nil
}

// row is one stage under test.
type row struct {
	name  string
	queue bool // a concurrency.Limiter with a wait queue, else a shedder
	fair  bool
}

// tally is what a row measured, added up over its rounds.
type tally struct {
	offered, served [2]int64 // [0] the quiet tenants together, [1] the noisy one
	elapsed         time.Duration
	cpu             time.Duration // the process's CPU time over the phase
}

func (t *tally) add(u tally) {
	for i := range t.offered {
		t.offered[i] += u.offered[i]
		t.served[i] += u.served[i]
	}
	t.elapsed += u.elapsed
	t.cpu += u.cpu
}

// capacityOf is the calls per second row r's stage serves.
func (o options) capacityOf(r row) float64 {
	c := float64(o.capacity) / o.work.Seconds()
	if !r.queue {
		c *= shedder.DefaultReadThreshold
	}
	return c
}

func run(args []string, out io.Writer) error {
	o, err := parse(args, out)
	if err != nil {
		return err
	}
	var rows []row
	if o.rows != "queue" {
		rows = append(rows, row{"shedder", false, false}, row{"shedder-fair", false, true})
	}
	if o.rows != "shedder" {
		rows = append(rows, row{"queue", true, false}, row{"queue-fair", true, true})
	}
	fmt.Fprintf(out, "command: %s\n", commandLine(args))
	fmt.Fprintf(out, "%d tenants, one noisy at %.1f shares, the others at %.1f; %s arrivals; calls hold a slot %s; capacity %d; %d round(s) of %s (+%s warm-up), interleaved\n",
		o.tenants, o.noisy, o.quiet, o.arrivals, o.work, o.capacity, o.rounds, o.duration, o.warmup)
	totals := make([]tally, len(rows))
	for rd := range o.rounds {
		for i, r := range rows {
			t, err := phase(o, r, o.seed+uint64(rd*len(rows)+i))
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "  round %d  %-13s quiet served %5.1f %%  noisy %4.2f shares\n", rd+1, r.name,
				pct(t.served[0], t.offered[0]), float64(t.served[1])/t.elapsed.Seconds()/(o.capacityOf(r)/float64(o.tenants)))
			totals[i].add(t)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tcapacity/s\tshare/s\tquiet offered/s each\tquiet served %\tnoisy offered/s\tnoisy served/s\tnoisy served, shares\tCPU µs/call\t")
	for i, r := range rows {
		t := totals[i]
		sec := t.elapsed.Seconds()
		share := o.capacityOf(r) / float64(o.tenants)
		quiet := float64(o.tenants - 1)
		calls := float64(max(t.offered[0]+t.offered[1], 1)) * (o.duration + o.warmup).Seconds() / o.duration.Seconds()
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%.2f\t%.1f\t\n", r.name, o.capacityOf(r), share,
			float64(t.offered[0])/sec/quiet, pct(t.served[0], t.offered[0]), float64(t.offered[1])/sec,
			float64(t.served[1])/sec, float64(t.served[1])/sec/share, float64(t.cpu.Microseconds())/calls)
	}
	return tw.Flush()
}

func pct(n, of int64) float64 { return 100 * float64(n) / float64(max(of, 1)) }

// stage builds row r's stage.
func stage(o options, r row) (floodgate.Admitter, error) {
	var f *floodgate.Fairness
	if r.fair {
		f = &floodgate.Fairness{By: "tenant"}
	}
	if r.queue {
		return concurrency.New(concurrency.WithGlobal(int64(o.capacity)),
			concurrency.WithWait(concurrency.Wait{Max: o.max, Fairness: f}))
	}
	s, err := shedder.New(int64(o.capacity))
	if err != nil {
		return nil, err
	}
	return s, s.Reconfigure(shedder.Config{Capacity: int64(o.capacity), Fairness: f})
}

// phase offers every tenant's load to a fresh stage of row r for warm-up
// plus duration and counts the calls that arrived in the measured part.
func phase(o options, r row, seed uint64) (tally, error) {
	a, err := stage(o, r)
	if err != nil {
		return tally{}, err
	}
	share := o.capacityOf(r) / float64(o.tenants)
	var (
		t       tally
		offered [2]atomic.Int64
		served  [2]atomic.Int64
		wg      sync.WaitGroup
	)
	cpu0 := cpuTime()
	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.duration)
	for k := range o.tenants {
		noisy := k == 0
		rate, class := o.quiet*share, 0
		if noisy {
			rate, class = o.noisy*share, 1
		}
		req := floodgate.Request{Method: "/svc/Read", Priority: floodgate.PriorityRead, Identity: floodgate.Identity{Tenant: fmt.Sprintf("tenant-%d", k)}}
		rng := rand.New(rand.NewPCG(seed, uint64(k)))
		wg.Go(func() {
			var calls sync.WaitGroup
			defer calls.Wait()
			next := start.Add(time.Duration(rng.Float64() / rate * float64(time.Second)))
			for next.Before(end) {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				measured := !next.Before(measureFrom)
				if measured {
					offered[class].Add(1)
				}
				calls.Go(func() {
					r := req
					d, done, _ := a.Admit(context.Background(), &r)
					if !d.Allowed {
						return
					}
					if measured {
						served[class].Add(1)
					}
					time.Sleep(o.work)
					done(floodgate.Result{})
				})
				gap := 1 / rate
				if o.arrivals == "poisson" {
					gap = rng.ExpFloat64() / rate
				}
				next = next.Add(time.Duration(gap * float64(time.Second)))
			}
		})
	}
	wg.Wait()
	for i := range t.offered {
		t.offered[i], t.served[i] = offered[i].Load(), served[i].Load()
	}
	t.elapsed, t.cpu = o.duration, cpuTime()-cpu0
	return t, nil
}

// cpuTime is the process's user and system CPU time so far (0 where it
// cannot be read).
func cpuTime() time.Duration {
	d, _ := harness.ProcessCPU()
	return d
}

func commandLine(args []string) string {
	return "(in bench) go run ./cmd/fairness " + harness.CommandLine(args[1:])
}
