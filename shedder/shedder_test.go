package shedder_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/testing/clock"
)

var ctx = context.Background()

// load drives a Shedder's in-flight count with critical requests, which are
// never shed, holding their Dones.
type load struct {
	t     *testing.T
	s     *shedder.Shedder
	dones []floodgate.Done
}

func (l *load) set(n int) {
	l.t.Helper()
	for len(l.dones) < n {
		d, done, _ := l.s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		if !d.Allowed || done == nil {
			l.t.Fatalf("critical request refused at in-flight %d: %+v", len(l.dones), d)
		}
		l.dones = append(l.dones, done)
	}
	for len(l.dones) > n {
		l.dones[len(l.dones)-1](floodgate.Result{})
		l.dones = l.dones[:len(l.dones)-1]
	}
	if got := l.s.InFlight(); got != int64(n) {
		l.t.Fatalf("in flight = %d, want %d", got, n)
	}
}

// probe admits one request of priority p and, if admitted, ends it at once,
// so the in-flight count is unchanged. It reports whether p was admitted.
func probe(t *testing.T, s *shedder.Shedder, p floodgate.Priority) (floodgate.Decision, bool) {
	t.Helper()
	before := s.InFlight()
	d, done, err := s.Admit(ctx, &floodgate.Request{Priority: p})
	if err != nil {
		t.Fatalf("Admit(%s): unexpected error %v", p, err)
	}
	if d.Allowed != (done != nil) {
		t.Fatalf("Admit(%s): allowed=%v but done nil=%v", p, d.Allowed, done == nil)
	}
	if done != nil {
		done(floodgate.Result{})
	}
	if after := s.InFlight(); after != before {
		t.Fatalf("probe of %s changed in flight from %d to %d", p, before, after)
	}
	return d, d.Allowed
}

var classes = []floodgate.Priority{floodgate.PriorityTest, floodgate.PriorityRead, floodgate.PriorityWrite, floodgate.PriorityCritical}

// With capacity 100 and the default thresholds, while in flight climbs from
// 0 to 120: test is shed from 70, read from 80, write from 90, critical
// never.
func TestShedOrderRisingLoad(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s, err := shedder.New(100, shedder.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	firstShed := map[floodgate.Priority]int{}
	l := &load{t: t, s: s}
	for n := 0; n <= 120; n++ {
		l.set(n)
		for _, p := range classes {
			_, ok := probe(t, s, p)
			want := true
			switch p {
			case floodgate.PriorityTest:
				want = n < 70
			case floodgate.PriorityRead:
				want = n < 80
			case floodgate.PriorityWrite:
				want = n < 90
			}
			if ok != want {
				t.Fatalf("in flight %d: %s admitted=%v, want %v", n, p, ok, want)
			}
			if _, seen := firstShed[p]; !ok && !seen {
				firstShed[p] = n
			}
		}
		clk.Advance(10 * time.Millisecond)
	}
	want := map[floodgate.Priority]int{floodgate.PriorityTest: 70, floodgate.PriorityRead: 80, floodgate.PriorityWrite: 90}
	for p, n := range want {
		if firstShed[p] != n {
			t.Errorf("%s first shed at %d, want %d", p, firstShed[p], n)
		}
	}
	if n, ok := firstShed[floodgate.PriorityCritical]; ok {
		t.Errorf("critical shed at %d, want never", n)
	}
	l.set(0)
}

func TestShedDecision(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s, err := shedder.New(100, shedder.WithClock(clk), shedder.WithRetryAfter(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l := &load{t: t, s: s}
	l.set(75)
	d, ok := probe(t, s, floodgate.PriorityTest)
	want := floodgate.Decision{
		Allowed: false, Stage: floodgate.StageShedder, Source: floodgate.SourceShedder,
		Policy: "shedder", Limit: 100, Remaining: 25, RetryAfter: 3 * time.Second,
		Priority: floodgate.PriorityTest,
	}
	if ok || d != want {
		t.Errorf("shed decision = %+v, want %+v", d, want)
	}
	d, ok = probe(t, s, floodgate.PriorityRead)
	want = floodgate.Decision{
		Allowed: true, Stage: floodgate.StageShedder, Source: floodgate.SourceShedder,
		Limit: 100, Remaining: 24, Priority: floodgate.PriorityRead,
	}
	if !ok || d != want {
		t.Errorf("allow decision = %+v, want %+v", d, want)
	}
	l.set(0)
}

// PriorityUnspecified is treated as the default priority: write unless
// configured.
func TestDefaultPriority(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts []shedder.Option
		want floodgate.Priority
		from int
	}{
		{nil, floodgate.PriorityWrite, 90},
		{[]shedder.Option{shedder.WithDefaultPriority(floodgate.PriorityTest)}, floodgate.PriorityTest, 70},
	} {
		s, err := shedder.New(100, append(tc.opts, shedder.WithClock(clock.New(time.Time{})))...)
		if err != nil {
			t.Fatal(err)
		}
		l := &load{t: t, s: s}
		l.set(tc.from - 1)
		if d, ok := probe(t, s, floodgate.PriorityUnspecified); !ok || d.Priority != tc.want {
			t.Errorf("at %d: unspecified admitted=%v priority=%s, want admitted as %s", tc.from-1, ok, d.Priority, tc.want)
		}
		l.set(tc.from)
		if d, ok := probe(t, s, floodgate.PriorityUnspecified); ok || d.Priority != tc.want {
			t.Errorf("at %d: unspecified admitted=%v priority=%s, want shed as %s", tc.from, ok, d.Priority, tc.want)
		}
		l.set(0)
	}
}

func TestInvalidPriorityUsesDefaultAndSaysSo(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(10)
	if err != nil {
		t.Fatal(err)
	}
	d, done, err := s.Admit(ctx, &floodgate.Request{Priority: 42})
	if !errors.Is(err, shedder.ErrInvalidPriority) || !d.Allowed || d.Priority != floodgate.PriorityWrite {
		t.Fatalf("Admit(priority 42) = %+v, %v; want allowed as write with ErrInvalidPriority", d, err)
	}
	done(floodgate.Result{})
}

// transitions counts how often the admitted/shed outcome of priority p
// changes along a sequence of in-flight levels, one step per 100ms.
func transitions(t *testing.T, s *shedder.Shedder, clk *clock.Fake, p floodgate.Priority, levels []int) (changes, shed int) {
	t.Helper()
	l := &load{t: t, s: s}
	last := true
	for _, n := range levels {
		l.set(n)
		_, ok := probe(t, s, p)
		if ok != last {
			changes++
		}
		if !ok {
			shed++
		}
		last = ok
		clk.Advance(100 * time.Millisecond)
	}
	l.set(0)
	return changes, shed
}

// Load oscillating around the test threshold (68 <-> 71): without
// hysteresis the test class flaps on every swing; with the default
// hysteresis (band 5, hold 1s) it starts being shed once and stays shed.
func TestNoFlappingAroundThreshold(t *testing.T) {
	t.Parallel()
	var levels []int
	for range 20 {
		levels = append(levels, 71, 68)
	}

	clk := clock.New(time.Time{})
	flappy, err := shedder.New(100, shedder.WithClock(clk), shedder.WithHysteresis(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	changes, shed := transitions(t, flappy, clk, floodgate.PriorityTest, levels)
	if changes != 40 || shed != 20 {
		t.Errorf("without hysteresis: %d changes, %d shed; want 40 changes (flapping), 20 shed", changes, shed)
	}

	clk = clock.New(time.Time{})
	steady, err := shedder.New(100, shedder.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	changes, shed = transitions(t, steady, clk, floodgate.PriorityTest, levels)
	if changes != 1 || shed != 40 {
		t.Errorf("with hysteresis: %d changes, %d shed; want 1 change, 40 shed", changes, shed)
	}
}

// Shedding stops only below threshold - band AND after the hold.
func TestHysteresisRecovery(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s, err := shedder.New(100, shedder.WithClock(clk), shedder.WithHysteresis(0.05, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if start, stop := s.Threshold(floodgate.PriorityTest); start != 70 || stop != 65 {
		t.Fatalf("test threshold = %d/%d, want 70/65", start, stop)
	}
	l := &load{t: t, s: s}
	step := func(n int, advance time.Duration, want bool) {
		t.Helper()
		clk.Advance(advance)
		l.set(n)
		if _, ok := probe(t, s, floodgate.PriorityTest); ok != want {
			t.Fatalf("in flight %d after +%s: test admitted=%v, want %v", n, advance, ok, want)
		}
		if s.Shedding(floodgate.PriorityTest) == want {
			t.Fatalf("in flight %d: Shedding(test)=%v, want %v", n, !want, !want)
		}
	}
	step(69, 0, true)                     // below threshold
	step(70, 0, false)                    // reaches threshold: shed
	step(66, 0, false)                    // inside the band: still shed
	step(65, 5*time.Second, false)        // band edge (65 is not below 65)
	step(64, 0, true)                     // below band, last >= 70 was 5s ago
	step(72, 0, false)                    // back over: shed, hold restarts now
	step(60, 999*time.Millisecond, false) // below band but hold not passed
	step(60, time.Millisecond, true)      // hold passed exactly
	step(69, 10*time.Millisecond, true)   // inside band but not shedding: admitted
	step(70, 0, false)                    // threshold again
	step(0, 999*time.Millisecond, false)  // empty but within hold
	step(0, 1*time.Millisecond, true)     // recovered
	if s.Shedding(floodgate.PriorityRead) || s.Shedding(floodgate.PriorityWrite) {
		t.Error("read or write entered shedding although in flight never reached 80")
	}
	l.set(0)
}

// A tiny capacity, where the band would swallow the whole threshold, still
// recovers once nothing is in flight.
func TestTinyCapacityRecovers(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(1)
	if err != nil {
		t.Fatal(err)
	}
	if start, stop := s.Threshold(floodgate.PriorityTest); start != 1 || stop != 1 {
		t.Fatalf("capacity 1: test threshold %d/%d, want 1/1", start, stop)
	}
	l := &load{t: t, s: s}
	l.set(1)
	if _, ok := probe(t, s, floodgate.PriorityWrite); ok {
		t.Fatal("write admitted at 1 of capacity 1")
	}
	l.set(0)
	if _, ok := probe(t, s, floodgate.PriorityWrite); !ok {
		t.Fatal("write shed with nothing in flight")
	}
}

// 10 000 requests of mixed priorities, ended by return, panic and context
// cancellation from 8 concurrent loops, leave in flight at exactly 0.
func TestNoLeaks(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(6)
	if err != nil {
		t.Fatal(err)
	}
	// 5 critical requests held throughout: test and read (threshold 5 of
	// capacity 6) are always shed, writes only while another is in flight.
	l := &load{t: t, s: s}
	l.set(5)
	const workers, perWorker = 8, 1250
	var admitted, shedCount, panics, cancels atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				n := w*perWorker + i
				req := &floodgate.Request{Priority: floodgate.Priority(n % floodgate.NumPriorities)}
				rctx, cancel := context.WithCancel(ctx)
				func() {
					defer func() {
						if recover() != nil {
							panics.Add(1)
						}
					}()
					d, done, _ := s.Admit(rctx, req)
					if !d.Allowed {
						shedCount.Add(1)
						return
					}
					admitted.Add(1)
					defer done(floodgate.Result{}) // what the transports do
					switch n % 3 {
					case 0: // return
					case 1:
						panic("handler panics")
					case 2:
						cancel()
						<-rctx.Done()
						cancels.Add(1)
					}
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	l.set(0)
	if got := s.InFlight(); got != 0 {
		t.Fatalf("in flight after all requests ended = %d, want 0", got)
	}
	if admitted.Load()+shedCount.Load() != workers*perWorker {
		t.Fatalf("admitted %d + shed %d != %d", admitted.Load(), shedCount.Load(), workers*perWorker)
	}
	if admitted.Load() == 0 || shedCount.Load() == 0 || panics.Load() == 0 || cancels.Load() == 0 {
		t.Fatalf("admitted=%d shed=%d panics=%d cancels=%d: every outcome must be exercised", admitted.Load(), shedCount.Load(), panics.Load(), cancels.Load())
	}
	t.Logf("admitted %d (panics %d, cancels %d), shed %d", admitted.Load(), panics.Load(), cancels.Load(), shedCount.Load())
}

func TestAdmitAllocatesNothing(t *testing.T) {
	s, err := shedder.New(100)
	if err != nil {
		t.Fatal(err)
	}
	req := &floodgate.Request{Priority: floodgate.PriorityRead}
	for name, a := range map[string]floodgate.Admitter{"Shedder": s} {
		allocs := testing.AllocsPerRun(1000, func() {
			_, done, _ := a.Admit(ctx, req)
			done(floodgate.Result{})
		})
		if allocs != 0 {
			t.Errorf("%s Admit+Done allocates %v times per request, want 0", name, allocs)
		}
	}
}
