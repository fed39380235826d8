package shedder_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// service is a processor-sharing model of a service on fake time, as in
// package concurrency's tests: up to servers requests run at full speed,
// more share them. Clients are closed-loop, one priority each; a client
// calls again 1ms after an answer or a shed. Everything is deterministic.
type service struct {
	servers int
	work    time.Duration
	mix     []floodgate.Priority // one client per entry

	busy, steps int // sums of requests in flight per step, for a fake CPU meter
}

type simJob struct {
	done   floodgate.Done
	left   time.Duration
	start  time.Time
	client int
}

type simStats struct {
	served, shed [floodgate.NumPriorities]int
	lat          [floodgate.NumPriorities][]time.Duration
	capacities   []int64 // at the end of every simulated 100ms; -1 during a probe
}

// servedTotal is the number of requests served, every priority.
func (st *simStats) servedTotal() int {
	n := 0
	for _, v := range st.served {
		n += v
	}
	return n
}

// within reports the capacities of samples [from, to) outside [lo, hi],
// probes left out.
func (st *simStats) within(from, to int, lo, hi int64) []int64 {
	var out []int64
	for _, c := range st.capacities[from:to] {
		if c >= 0 && (c < lo || c > hi) {
			out = append(out, c)
		}
	}
	return out
}

func (st *simStats) p99(p floodgate.Priority) time.Duration {
	l := slices.Clone(st.lat[p])
	slices.Sort(l)
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(0.99*float64(len(l))+0.5)-1)]
}

// mix10 is the overload mix of BenchmarkOverload: 10% critical, 30% each
// of write, read and test.
func mix10(clients int) []floodgate.Priority {
	var m []floodgate.Priority
	for i := range clients {
		switch i % 10 {
		case 0:
			m = append(m, floodgate.PriorityCritical)
		case 1, 2, 3:
			m = append(m, floodgate.PriorityWrite)
		case 4, 5, 6:
			m = append(m, floodgate.PriorityRead)
		default:
			m = append(m, floodgate.PriorityTest)
		}
	}
	return m
}

func (s *service) run(t *testing.T, a floodgate.Admitter, capacity func() int64, clk *clock.Fake, d time.Duration, change func(time.Duration, *service)) *simStats {
	t.Helper()
	const step = time.Millisecond
	st := &simStats{}
	var jobs []simJob
	wait := make([]time.Duration, len(s.mix))
	reqs := make([]floodgate.Request, len(s.mix)) // each client's request, built once
	for elapsed := time.Duration(0); elapsed < d; elapsed += step {
		if change != nil {
			change(elapsed, s)
		}
		for c, p := range s.mix {
			switch {
			case wait[c] < 0:
				continue
			case wait[c] > 0:
				wait[c] -= step
				continue
			}
			reqs[c].Priority = p
			dec, done, _ := a.Admit(ctx, &reqs[c])
			if !dec.Allowed {
				st.shed[p]++
				wait[c] = step
				continue
			}
			jobs = append(jobs, simJob{done: done, left: s.work, start: clk.Now(), client: c})
			wait[c] = -1
		}
		clk.Advance(step)
		share := step
		if len(jobs) > s.servers {
			share = step * time.Duration(s.servers) / time.Duration(len(jobs))
		}
		kept := jobs[:0]
		for i := range jobs {
			j := &jobs[i]
			if j.left -= share; j.left > 0 {
				kept = append(kept, *j)
				continue
			}
			j.done(floodgate.Result{})
			p := s.mix[j.client]
			st.served[p]++
			st.lat[p] = append(st.lat[p], clk.Now().Sub(j.start))
			wait[j.client] = step
		}
		jobs = kept
		s.busy += len(jobs)
		s.steps++
		if (elapsed+step)%(100*time.Millisecond) == 0 {
			st.capacities = append(st.capacities, capacity())
		}
	}
	for _, j := range jobs {
		j.done(floodgate.Ignored)
	}
	return st
}

// cpuOf is a fake CPU meter for s: the requests in flight on average since
// its previous reading, over cores; a service whose CPU saturates at
// cores requests in flight.
func (s *service) cpuOf(cores float64) interface{ Utilization() (float64, error) } {
	return cpuFunc(func() (float64, error) {
		if s.steps == 0 {
			return 0, nil
		}
		u := float64(s.busy) / float64(s.steps) / cores
		s.busy, s.steps = 0, 0
		return u, nil
	})
}

type cpuFunc func() (float64, error)

func (f cpuFunc) Utilization() (float64, error) { return f() }

// capacityOf samples s's capacity, -1 during a probe.
func capacityOf(s *shedder.Shedder) func() int64 {
	return func() int64 {
		if s.Stats().Probing {
			return -1
		}
		return s.Capacity()
	}
}

func newAdaptiveShedder(t *testing.T, clk *clock.Fake, initial int64, a shedder.AdaptiveCapacity, opts ...shedder.Option) *shedder.Shedder {
	t.Helper()
	s, err := shedder.New(initial, append([]shedder.Option{shedder.WithClock(clk), shedder.WithAdaptiveCapacity(a)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A service of 20 servers and 10ms of work, offered 100 closed-loop
// clients (10% critical, 30% each write, read, test: 5x its capacity);
// after 12s it doubles to 40 servers. The adaptive capacity, started at 5,
// finds each size: it stays within [18, 30] on the first and [40, 80] on
// the second (probes aside; each phase holds one probe of the default
// 10s Probe, and the capacity finds each size within 2s), critical
// traffic is never shed and its p99 stays within 2x the 10ms of an
// unloaded request, and the service serves at least 90% of what it could.
// A capacity fixed for the first size (24) serves less once the service
// has doubled; one fixed for the second (70) makes critical requests wait
// past 2x on the first.
func TestAdaptiveCapacityFollowsService(t *testing.T) {
	t.Parallel()
	const phase = 12 * time.Second
	grow := func(e time.Duration, svc *service) {
		if e == phase {
			svc.servers = 40
		}
	}
	const ideal = 20*100*12 + 40*100*12 // requests the service can serve in the run
	clk := clock.New(time.Time{})
	s := newAdaptiveShedder(t, clk, 5, shedder.AdaptiveCapacity{Min: 2, Max: 500})
	st := (&service{servers: 20, work: 10 * time.Millisecond, mix: mix10(100)}).run(t, s, capacityOf(s), clk, 2*phase, grow)
	if st.shed[floodgate.PriorityCritical] != 0 {
		t.Errorf("%d critical requests shed", st.shed[floodgate.PriorityCritical])
	}
	if p99 := st.p99(floodgate.PriorityCritical); p99 > 20*time.Millisecond {
		t.Errorf("critical p99 %s, want <= 2 x 10ms", p99)
	}
	if n := st.servedTotal(); n < ideal*9/10 {
		t.Errorf("served %d, want >= 90%% of the %d the service can serve", n, ideal)
	}
	if out := st.within(50, 120, 18, 30); len(out) > 0 {
		t.Errorf("capacity outside [18, 30] with 20 servers: %v", out)
	}
	if out := st.within(170, 240, 40, 80); len(out) > 0 {
		t.Errorf("capacity outside [40, 80] with 40 servers: %v", out)
	}
	if s.InFlight() != 0 {
		t.Fatalf("in flight %d after the run", s.InFlight())
	}

	// The fixed capacities: 24 over the whole run (it falls behind on
	// the second size), 70 over the first size only (where it fails).
	fixed := func(capacity int64, d time.Duration) *simStats {
		clk := clock.New(time.Time{})
		f, err := shedder.New(capacity, shedder.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		return (&service{servers: 20, work: 10 * time.Millisecond, mix: mix10(100)}).run(t, f, f.Capacity, clk, d, grow)
	}
	low, high := fixed(24, 2*phase), fixed(70, phase)
	if low.servedTotal() >= st.servedTotal()*95/100 {
		t.Errorf("fixed 24 served %d, adaptive %d: want the fixed one at least 5%% behind", low.servedTotal(), st.servedTotal())
	}
	if p99 := high.p99(floodgate.PriorityCritical); p99 <= 20*time.Millisecond {
		t.Errorf("fixed 70 on 20 servers: critical p99 %s, want above 2 x 10ms (the case adaptive avoids; adaptive: %s)", p99, st.p99(floodgate.PriorityCritical))
	}
}

// A CPU-bound service (its latency does not rise: the model has servers
// to spare, but its CPU saturates at 20 requests in flight, half of them
// the critical clients'): with a CPUTarget of 0.9 the capacity keeps the
// CPU near 90% (it settles within a second; the mean is over the last
// 3.75s of a 5s run); without one, nothing says the service is overloaded
// and the capacity climbs to Max (from 5 to 80 by doubling: within 1s;
// the run is 2s).
func TestAdaptiveCapacityCPU(t *testing.T) {
	t.Parallel()
	run := func(target float64, d time.Duration) (*shedder.Shedder, []float64) {
		clk := clock.New(time.Time{})
		svc := &service{servers: 1000, work: 10 * time.Millisecond, mix: mix10(100)}
		var readings []float64
		meter := svc.cpuOf(20)
		s := newAdaptiveShedder(t, clk, 5, shedder.AdaptiveCapacity{Min: 2, Max: 80, CPUTarget: target}, shedder.WithCPU(cpuFunc(func() (float64, error) {
			u, err := meter.Utilization()
			readings = append(readings, u)
			return u, err
		})))
		svc.run(t, s, s.Capacity, clk, d, nil)
		return s, readings
	}
	_, readings := run(0.9, 5*time.Second)
	late := readings[len(readings)/4:]
	mean := 0.0
	for _, u := range late {
		mean += u / float64(len(late))
	}
	if mean < 0.8 || mean > 0.95 {
		t.Errorf("with a CPU target of 0.9: mean CPU over the last 3.75s %.3f, want within [0.8, 0.95]", mean)
	}
	s, readings := run(0, 2*time.Second)
	if s.Capacity() != 80 || len(readings) != 0 {
		t.Errorf("without a CPU target: capacity %d, %d CPU readings; want Max 80 and none", s.Capacity(), len(readings))
	}
}

// A CPU reading that fails is reported in Stats and the window is decided
// on latency alone.
func TestAdaptiveCapacityCPUError(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	fail := cpuFunc(func() (float64, error) { return 0, errors.New("cgroup gone") })
	s := newAdaptiveShedder(t, clk, 5, shedder.AdaptiveCapacity{Min: 2, Max: 8, CPUTarget: 0.5}, shedder.WithCPU(fail))
	(&service{servers: 1000, work: 10 * time.Millisecond, mix: mix10(100)}).run(t, s, s.Capacity, clk, 2*time.Second, nil)
	st := s.Stats()
	if st.CPUErr == nil || st.CPU != -1 || st.Capacity != 8 {
		t.Errorf("stats %+v: want the CPU error, no reading, and the capacity grown to Max 8 on latency alone", st)
	}
}

// Floors and ceilings: a service whose latency never rises takes the
// capacity to Max and no further; one far too small for its load takes it
// to Min and no lower. Each run is 4s, 40 windows: 5 grows to 50 by 10% a
// window in 25, 40 falls to 4 by 0.9 a window in 22, and the rest shows
// the capacity stays there.
func TestAdaptiveCapacityFloorAndCeiling(t *testing.T) {
	t.Parallel()
	const d = 4 * time.Second
	clk := clock.New(time.Time{})
	s := newAdaptiveShedder(t, clk, 5, shedder.AdaptiveCapacity{Min: 4, Max: 50})
	st := (&service{servers: 1000, work: 10 * time.Millisecond, mix: mix10(100)}).run(t, s, s.Capacity, clk, d, nil)
	if hi := slices.Max(st.capacities); hi != 50 || s.Capacity() != 50 {
		t.Errorf("capacity reached %d, ends at %d: want Max 50", hi, s.Capacity())
	}
	clk = clock.New(time.Time{})
	hot := cpuFunc(func() (float64, error) { return 1, nil })
	s = newAdaptiveShedder(t, clk, 40, shedder.AdaptiveCapacity{Min: 4, Max: 50, CPUTarget: 0.9}, shedder.WithCPU(hot))
	st = (&service{servers: 1000, work: 10 * time.Millisecond, mix: mix10(100)}).run(t, s, s.Capacity, clk, d, nil)
	if lo := slices.Min(st.capacities); lo != 4 || s.Capacity() != 4 {
		t.Errorf("capacity fell to %d, ends at %d: want Min 4", lo, s.Capacity())
	}
}

// A capacity started far too high under a load that never lets it shed
// (its first window's latency, already queued, is taken for the least)
// comes down through probes: every Probe the capacity is halved for two
// windows and the least latency measured again. With a Probe of 2s (the
// default 10s probes the same way, five times slower), a 12s run holds
// five probes, and after them the capacity stays within 3x the 20 servers.
func TestAdaptiveCapacityProbesFromTooHigh(t *testing.T) {
	t.Parallel()
	const probe = 2 * time.Second
	clk := clock.New(time.Time{})
	s := newAdaptiveShedder(t, clk, 200, shedder.AdaptiveCapacity{Min: 2, Max: 500, Probe: probe})
	st := (&service{servers: 20, work: 10 * time.Millisecond, mix: mix10(100)}).run(t, s, capacityOf(s), clk, 6*probe, nil)
	probes := 0
	for i, c := range st.capacities {
		if c < 0 && (i == 0 || st.capacities[i-1] >= 0) {
			probes++
		}
	}
	last := st.capacities[len(st.capacities)-int(probe/(100*time.Millisecond)):]
	if hi := slices.Max(last); probes < 4 || hi > 60 {
		t.Errorf("%d probes, capacity up to %d over the last %s: want at least 4 probes and at most 60 (from 200, for 20 servers); capacities: %v", probes, hi, probe, st.capacities)
	}
}
