// Command deadline measures what a concurrency limiter's wait queue does
// to calls with deadlines under overload: a service whose dependency
// serves -slots calls at once, -work each (capacity slots/work calls per
// second), behind a concurrency.Limiter capped at -slots in flight whose
// requests may wait -max for a slot, is offered -overload times its
// capacity (Poisson arrivals, open loop) for -duration, every call with a
// -deadline. Goodput is the calls answered before their deadline, per
// second and as a share of the capacity.
//
// Rows, interleaved over -rounds, each a fresh limiter:
//
//	fifo   the default order: the oldest waiting request gets a freed slot
//	lifo   the newest first
//	codel  FIFO while the queue drains, LIFO with waits cut to 5 ms once it
//	       stands (concurrency.CoDel)
//
// Every row runs with the requests' deadlines in their contexts, so the
// limiter refuses at once a request its queue's pace would serve too late
// (package concurrency, "Waiting for a slot"), and -unaware adds the
// three with contexts that carry no deadline (the client still gives up
// at it): what a queue that does not know the deadline does, the figure
// before the limiter read it.
//
//	cd bench && go run ./cmd/deadline
//	cd bench && go run ./cmd/deadline -overload 3 -deadline 100ms -unaware
//
// What this program decides: the service, the load and the deadline are
// the same for every row; only the queue's order, and whether the queue
// sees the deadline, change. Everything runs in one process (the
// dependency sleeps; no CPU is the bottleneck), bounded by -duration plus
// -max.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/concurrency"
)

type options struct {
	slots          int
	work, deadline time.Duration
	max, duration  time.Duration
	overload       float64
	rounds         int
	unaware        bool
	seed           uint64
	warmup         time.Duration
	queue          int
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
	fs.IntVar(&o.slots, "slots", 16, "calls the dependency serves at once, and the limiter's cap")
	fs.DurationVar(&o.work, "work", 10*time.Millisecond, "the dependency's time per call")
	fs.DurationVar(&o.deadline, "deadline", 100*time.Millisecond, "every call's deadline")
	fs.DurationVar(&o.max, "max", time.Second, "the longest a request waits for a slot (concurrency.Wait.Max)")
	fs.IntVar(&o.queue, "queue", 1000, "the most requests waiting (concurrency.Wait.Queue)")
	fs.Float64Var(&o.overload, "overload", 3, "offered load as a multiple of the capacity")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per row and round")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each measured phase")
	fs.IntVar(&o.rounds, "rounds", 2, "interleaved rounds")
	fs.BoolVar(&o.unaware, "unaware", false, "also run each order with contexts that carry no deadline")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	switch {
	case o.slots < 1 || o.work <= 0 || o.deadline <= 0 || o.max <= 0 || o.queue < 1:
		return o, fmt.Errorf("-slots and -queue must be at least 1, -work, -deadline and -max positive")
	case !(o.overload > 0) || o.duration <= 0 || o.warmup < 0 || o.rounds < 1:
		return o, fmt.Errorf("-overload and -duration must be positive, -warmup not negative, -rounds at least 1")
	}
	return o, nil
}

// row is one configuration of the queue.
type row struct {
	name    string
	order   concurrency.WaitOrder
	unaware bool // the requests' contexts carry no deadline
}

// tally is what a row measured, added up over its rounds.
type tally struct {
	offered, good, refused, expired, lateDone int64
	elapsed                                   time.Duration
	lat                                       []time.Duration // of the calls answered in time
}

func run(args []string, out io.Writer) error {
	o, err := parse(args, out)
	if err != nil {
		return err
	}
	rows := []row{{"fifo", concurrency.FIFO, false}, {"lifo", concurrency.LIFO, false}, {"codel", concurrency.CoDel, false}}
	if o.unaware {
		rows = append(rows, row{"fifo-unaware", concurrency.FIFO, true}, row{"lifo-unaware", concurrency.LIFO, true}, row{"codel-unaware", concurrency.CoDel, true})
	}
	capacity := float64(o.slots) / o.work.Seconds()
	fmt.Fprintf(out, "command: %s\n", commandLine(args))
	fmt.Fprintf(out, "service: %d slots of %s (capacity %.0f calls/s); offered %.1fx (%.0f calls/s, Poisson); deadline %s; wait max %s, queue %d; %d round(s) of %s (+%s warm-up), interleaved\n",
		o.slots, o.work, capacity, o.overload, o.overload*capacity, o.deadline, o.max, o.queue, o.rounds, o.duration, o.warmup)
	totals := make([]tally, len(rows))
	for rd := range o.rounds {
		for i, r := range rows {
			t, err := phase(o, r, o.seed+uint64(rd*len(rows)+i))
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "  round %d  %-14s goodput %6.0f/s\n", rd+1, r.name, float64(t.good)/t.elapsed.Seconds())
			totals[i].add(t)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "queue\toffered/s\tgoodput/s\tof capacity\trefused at once %\texpired waiting %\tanswered late %\tp50 ms\tp99 ms\t")
	for i, r := range rows {
		t := totals[i]
		sec := t.elapsed.Seconds()
		pct := func(n int64) float64 { return 100 * float64(n) / float64(max(t.offered, 1)) }
		p50, p99 := quantile(t.lat, 0.50), quantile(t.lat, 0.99)
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.1f %%\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", r.name, float64(t.offered)/sec, float64(t.good)/sec,
			100*float64(t.good)/sec/capacity, pct(t.refused), pct(t.expired), pct(t.lateDone), ms(p50), ms(p99))
	}
	return tw.Flush()
}

func (t *tally) add(u tally) {
	t.offered += u.offered
	t.good += u.good
	t.refused += u.refused
	t.expired += u.expired
	t.lateDone += u.lateDone
	t.elapsed += u.elapsed
	t.lat = append(t.lat, u.lat...)
}

// phase offers the load to a fresh limiter of row r for warm-up plus
// duration and counts the calls that arrived in the measured part.
func phase(o options, r row, seed uint64) (tally, error) {
	l, err := concurrency.New(concurrency.WithGlobal(int64(o.slots)),
		concurrency.WithWait(concurrency.Wait{Max: o.max, Queue: o.queue, Order: r.order}))
	if err != nil {
		return tally{}, err
	}
	dep := make(chan struct{}, o.slots) // the dependency's slots
	rate := o.overload * float64(o.slots) / o.work.Seconds()
	rng := rand.New(rand.NewPCG(seed, 7))
	var (
		mu  sync.Mutex
		t   tally
		wg  sync.WaitGroup
		off atomic.Int64
	)
	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.duration)
	next := start
	for next.Before(end) {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		arrived := time.Now()
		measured := !arrived.Before(measureFrom) && arrived.Before(end)
		if measured {
			off.Add(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome, lat := call(l, dep, o, r, arrived)
			if !measured {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch outcome {
			case good:
				t.good++
				t.lat = append(t.lat, lat)
			case refused:
				t.refused++
			case expired:
				t.expired++
			case late:
				t.lateDone++
			}
		}()
	}
	wg.Wait()
	t.offered, t.elapsed = off.Load(), o.duration
	return t, nil
}

type outcome int

const (
	good    outcome = iota // answered before its deadline
	refused                // denied at once (no slot, no room to wait, or too late by the queue's pace)
	expired                // its deadline passed while it waited
	late                   // ran, and answered after its deadline
)

// call is one request: a slot from the limiter, then the dependency.
func call(l *concurrency.Limiter, dep chan struct{}, o options, r row, arrived time.Time) (outcome, time.Duration) {
	ctx := context.Background()
	if !r.unaware {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, arrived.Add(o.deadline))
		defer cancel()
	}
	d, done, err := l.Admit(ctx, &floodgate.Request{Method: "/svc/Call", Priority: floodgate.PriorityRead})
	if !d.Allowed {
		if err != nil {
			return expired, 0
		}
		if time.Since(arrived) >= o.deadline {
			return expired, 0 // waited out its deadline (Max, for an unaware context)
		}
		return refused, 0
	}
	dep <- struct{}{}
	time.Sleep(o.work)
	<-dep
	done(floodgate.Result{})
	lat := time.Since(arrived)
	if lat > o.deadline {
		return late, lat
	}
	return good, lat
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func commandLine(args []string) string {
	return "(in bench) go run ./cmd/deadline " + harness.CommandLine(args[1:])
}
