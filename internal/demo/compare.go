package demo

import (
	"context"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/shedder"
)

// The overload comparison: after the main run, one service
// whose handler waits on a slow dependency is driven past its capacity
// three times, each time behind one stage: the shedder with the fixed
// capacity the main run uses, the shedder with an adaptive capacity, and
// an adaptive concurrency limit (Vegas) alone. Same service, same
// arrivals; only the stage changes.
const (
	compareSlots    = 16                    // calls the dependency serves at once
	compareWork     = 50 * time.Millisecond // its time per call
	compareOverload = 3                     // offered load over what it serves
	compareDeadline = time.Second           // of every call
)

// Comparison is the report's overload comparison.
type Comparison struct {
	// Service says what the service is, for people.
	Service string
	// Offered is the calls per second offered to every run.
	Offered float64
	// Warmup is the start of every run left out of the counts.
	Warmup time.Duration
	// Runs are the three runs, in the order above.
	Runs []CompareRun
}

// CompareRun is one run of the comparison.
type CompareRun struct {
	// Name names the stage ("fixed capacity 40", "adaptive capacity",
	// "adaptive concurrency (vegas)").
	Name string
	// Goodput is calls answered OK per second of the measured part.
	Goodput float64
	// CriticalServed is the share of critical calls answered OK.
	CriticalServed float64
	// CriticalP99 and P99 are the 99th percentile latencies of the
	// critical and of all calls answered OK.
	CriticalP99, P99 time.Duration
	// Refused counts calls the stage refused (shed or limited), Late
	// those that missed their deadline; CriticalRefused the critical ones
	// refused.
	Refused, Late, CriticalRefused int
	// Capacity is the stage's capacity (the shedder's) or limit (the
	// concurrency limiter's) every 100ms from the start of the run.
	Capacity []int64
}

// held returns the median, min and max of the capacity over the measured
// part.
func (c CompareRun) held(warmup time.Duration) (med, lo, hi int64) {
	s := c.Capacity[min(len(c.Capacity), int(warmup/(100*time.Millisecond))):]
	if len(s) == 0 {
		return 0, 0, 0
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

// compareStage is one stage of the comparison and how to read its
// capacity.
type compareStage struct {
	name     string
	admitter floodgate.Admitter
	capacity func() int64
}

// compare runs the comparison, each run d long (the first quarter a
// warm-up), one after the other.
func compare(ctx context.Context, d time.Duration, progress io.Writer) (*Comparison, error) {
	fixed, err := shedder.New(shedCapacity)
	if err != nil {
		return nil, err
	}
	adaptive, err := shedder.New(4, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{Min: 4, Max: 400}))
	if err != nil {
		return nil, err
	}
	vegas, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{
		Name: "adaptive-concurrency", Algorithm: concurrency.Vegas, Initial: 4, Min: 4, Max: 400, Window: 200 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	stages := []compareStage{
		{fmt.Sprintf("fixed capacity %d", shedCapacity), fixed, fixed.Capacity},
		{"adaptive capacity", adaptive, adaptive.Capacity},
		{"adaptive concurrency (vegas)", vegas, vegas.Limit},
	}
	c := &Comparison{
		Service: fmt.Sprintf("a gRPC service whose handler waits on a dependency that serves %d calls at once, %s each (%d calls/s at most)",
			compareSlots, compareWork, int(float64(compareSlots)/compareWork.Seconds())),
		Offered: compareOverload * float64(compareSlots) / compareWork.Seconds(),
		Warmup:  d / 4,
	}
	for i, st := range stages {
		r, err := compareRun(ctx, st, c.Offered, d, c.Warmup, uint64(i)+1)
		if err != nil {
			return nil, err
		}
		c.Runs = append(c.Runs, r)
		med, lo, hi := r.held(c.Warmup)
		fmt.Fprintf(progress, "  %-30s goodput %4.0f/s  critical served %6.2f%%  critical p99 %s  capacity %d (%d-%d)\n",
			r.Name, r.Goodput, 100*r.CriticalServed, fmtDur(r.CriticalP99), med, lo, hi)
	}
	return c, nil
}

// depService is the comparison's service: Plain waits for one of the
// dependency's slots, then for its work.
type depService struct {
	testpb.UnimplementedEchoServer
	slots chan struct{}
}

func (s *depService) Plain(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.slots }()
	t := time.NewTimer(compareWork)
	defer t.Stop()
	select {
	case <-t.C:
		return &testpb.EchoResponse{Message: in.GetMessage()}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// compareRun serves the service behind st on loopback and offers it
// Poisson arrivals of the demo's priority mix at rate per second for d.
func compareRun(ctx context.Context, st compareStage, rate float64, d, warmup time.Duration, seed uint64) (CompareRun, error) {
	out := CompareRun{Name: st.name}
	fg, err := interceptor.New(interceptor.WithPriorityHeader(headerPriority))
	if err != nil {
		return out, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(fg.UnaryServer(st.admitter)))
	testpb.RegisterEchoServer(srv, &depService{slots: make(chan struct{}, compareSlots)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return out, fmt.Errorf("demo: listen: %w", err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return out, fmt.Errorf("demo: grpc client: %w", err)
	}
	defer conn.Close()
	client := testpb.NewEchoClient(conn)

	mix := []struct {
		p     floodgate.Priority
		share float64
	}{{floodgate.PriorityCritical, 0.1}, {floodgate.PriorityWrite, 0.3}, {floodgate.PriorityRead, 0.3}, {floodgate.PriorityTest, 0.3}}
	var mds [floodgate.NumPriorities]metadata.MD
	for _, m := range mix {
		mds[m.p] = metadata.Pairs(headerPriority, m.p.String())
	}
	var (
		mu                 sync.Mutex
		wg                 sync.WaitGroup
		ok, critOK, critN  int
		lat, critLat       []time.Duration
		rng                = rand.New(rand.NewPCG(seed, 19))
		start              = time.Now()
		measureFrom, end   = start.Add(warmup), start.Add(d)
		next               = start
		sampleEvery        = 100 * time.Millisecond
		nextSample         = start
		refused, late, cRf int
	)
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		for !nextSample.After(now) {
			out.Capacity = append(out.Capacity, st.capacity())
			nextSample = nextSample.Add(sampleEvery)
		}
		for !next.After(now) {
			p, u := floodgate.PriorityCritical, rng.Float64()
			for _, m := range mix {
				if u < m.share {
					p = m.p
					break
				}
				u -= m.share
			}
			measured := !next.Before(measureFrom)
			wg.Go(func() {
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, mds[p]), compareDeadline)
				_, err := client.Plain(cctx, &testpb.EchoRequest{})
				cancel()
				l := time.Since(t0)
				if !measured {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				crit := p == floodgate.PriorityCritical
				if crit {
					critN++
				}
				switch status.Code(err) {
				case codes.OK:
					ok++
					lat = append(lat, l)
					if crit {
						critOK++
						critLat = append(critLat, l)
					}
				case codes.Unavailable, codes.ResourceExhausted:
					refused++
					if crit {
						cRf++
					}
				default:
					late++
				}
			})
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
		time.Sleep(min(time.Until(next), time.Until(nextSample), time.Millisecond))
	}
	wg.Wait()
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	out.Goodput = float64(ok) / (d - warmup).Seconds()
	if critN > 0 {
		out.CriticalServed = float64(critOK) / float64(critN)
	}
	_, out.P99 = quantiles(lat)
	_, out.CriticalP99 = quantiles(critLat)
	out.Refused, out.Late, out.CriticalRefused = refused, late, cRf
	return out, nil
}

// writeComparison prints the comparison as a text table.
func (c *Comparison) writeText(w io.Writer) error {
	fmt.Fprintf(w, "\nOverload: %s, offered %.0f calls/s (%dx), 10%% critical:\n\n", c.Service, c.Offered, compareOverload)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tcapacity held\tgoodput/s\tcritical served\tcritical p99\tp99\trefused\tcritical refused\tlate\t")
	for _, r := range c.Runs {
		med, lo, hi := r.held(c.Warmup)
		fmt.Fprintf(tw, "%s\t%d (%d-%d)\t%.0f\t%.2f%%\t%s\t%s\t%d\t%d\t%d\t\n", r.Name, med, lo, hi, r.Goodput, 100*r.CriticalServed,
			fmtDur(r.CriticalP99), fmtDur(r.P99), r.Refused, r.CriticalRefused, r.Late)
	}
	return tw.Flush()
}

// caption says what the comparison shows, from its numbers.
func (c *Comparison) caption() string {
	if len(c.Runs) != 3 {
		return ""
	}
	f, a, v := c.Runs[0], c.Runs[1], c.Runs[2]
	am, alo, ahi := a.held(c.Warmup)
	vm, _, _ := v.held(c.Warmup)
	return fmt.Sprintf("%s, offered %.0f calls/s. With the capacity fixed at %d, the shedder let more calls in than the dependency serves: "+
		"they queued, critical p99 %s, %.0f calls/s served. With an adaptive capacity it learnt %d (between %d and %d over the run) from latency and throughput, "+
		"served %.0f calls/s with critical p99 %s, and shed only non-critical calls (critical served %.2f%%). "+
		"The adaptive concurrency limit (Vegas) found %d in flight and served %.0f calls/s, but it knows no priorities: "+
		"%d critical calls were refused with the rest (critical served %.2f%%).",
		upperFirst(c.Service), c.Offered, shedCapacity, fmtDur(f.CriticalP99), f.Goodput,
		am, alo, ahi, a.Goodput, fmtDur(a.CriticalP99), 100*a.CriticalServed,
		vm, v.Goodput, v.CriticalRefused, 100*v.CriticalServed)
}

// svg draws each run's capacity over time on one chart.
func (c *Comparison) svg() string {
	const w, h, left, top, bottom = 720, 180, 44, 14, 28
	maxV, n := int64(1), 0
	for _, r := range c.Runs {
		for _, v := range r.Capacity {
			maxV = max(maxV, v)
		}
		n = max(n, len(r.Capacity))
	}
	if n < 2 {
		return ""
	}
	colors := []string{"#c0392b", "#2471a3", "#7d3c98"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="overload-capacity" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`, w, h, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="11" font-size="11">capacity / limit every 100 ms (max %d)</text>`, left, maxV)
	x := func(i int) float64 { return left + float64(i)*float64(w-left-10)/float64(n-1) }
	y := func(v int64) float64 { return float64(h-bottom) - float64(v)*float64(h-bottom-top)/float64(maxV) }
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, h-bottom, w-10, h-bottom)
	for i, r := range c.Runs {
		pts := make([]string, len(r.Capacity))
		for j, v := range r.Capacity {
			pts[j] = strconv.FormatFloat(x(j), 'f', 1, 64) + "," + strconv.FormatFloat(y(v), 'f', 1, 64)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, colors[i%len(colors)], strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`, left+i*230, h-8, colors[i%len(colors)], html.EscapeString(r.Name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}
