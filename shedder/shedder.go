package shedder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Default settings of a Shedder.
const (
	// DefaultTestThreshold is the share of capacity from which test traffic is shed.
	DefaultTestThreshold = 0.70
	// DefaultReadThreshold is the share of capacity from which reads are shed.
	DefaultReadThreshold = 0.80
	// DefaultWriteThreshold is the share of capacity from which writes are shed.
	DefaultWriteThreshold = 0.90
	// DefaultHysteresis is the band, a share of capacity, below a threshold
	// that in flight must reach before shedding stops.
	DefaultHysteresis = 0.05
	// DefaultRetryAfter is the RetryAfter of a shed Decision.
	DefaultRetryAfter = time.Second
	// DefaultPriority is the priority of a request whose Priority is
	// PriorityUnspecified.
	DefaultPriority = floodgate.PriorityWrite
	// DefaultPolicy is the Policy of a Shedder's shed Decisions.
	DefaultPolicy = "shedder"
)

// ErrInvalidPriority is returned, with a decision taken at the default
// priority, when a Request carries a Priority value outside the named ones.
var ErrInvalidPriority = errors.New("shedder: request priority is not a known priority; the default priority was used")

// Shedder is the worker-utilisation load shedder, a floodgate.Admitter. See
// the package documentation for what it decides. It is safe for concurrent
// use.
type Shedder struct {
	inflight atomic.Int64
	gates    [floodgate.NumPriorities]gate // critical's is never consulted
	verdicts
	done    floodgate.Done            // the Done of a fixed capacity
	est     atomic.Pointer[estimator] // nil: the capacity is fixed
	tickets sync.Pool                 // *ticket, adaptive capacity
	clock   floodgate.Clock

	mu         sync.Mutex // serialises capacity and threshold changes
	thresholds [floodgate.NumPriorities]float64
	band       float64
	fixed      int64 // the capacity Config reports
	adaptive   AdaptiveCapacity
	meter      CPUMeter // WithCPU's, or the last AdaptiveCapacity.CPU
}

var _ floodgate.Admitter = (*Shedder)(nil)

// New returns a Shedder for an instance sized for capacity requests in
// flight (capacity >= 1). It returns an error naming every bad option.
func New(capacity int64, opts ...Option) (*Shedder, error) {
	c := config{common: newCommon(DefaultPolicy)}
	c.thresholds[floodgate.PriorityTest] = DefaultTestThreshold
	c.thresholds[floodgate.PriorityRead] = DefaultReadThreshold
	c.thresholds[floodgate.PriorityWrite] = DefaultWriteThreshold
	if capacity < 1 {
		c.errs = append(c.errs, fmt.Errorf("shedder: capacity %d must be at least 1", capacity))
	}
	if capacity > MaxCapacity {
		c.errs = append(c.errs, fmt.Errorf("shedder: capacity %d must be at most MaxCapacity (%d)", capacity, int64(MaxCapacity)))
	}
	apply(&c, &c.common, "Option", opts)
	if c.adaptive != nil && c.adaptive.CPUTarget > 0 && c.meter == nil {
		c.fail("WithAdaptiveCapacity", "AdaptiveCapacity.CPUTarget %v needs a CPU meter (AdaptiveCapacity.CPU or WithCPU)", c.adaptive.CPUTarget)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	s := &Shedder{thresholds: c.thresholds, band: c.hysteresis, fixed: capacity, clock: c.timeSource(), meter: c.meter}
	for p := floodgate.PriorityTest; p < floodgate.PriorityCritical; p++ {
		s.gates[p].init(&c.common)
	}
	s.verdicts.init(&c.common, capacity)
	s.gates[floodgate.PriorityCritical].start.Store(math.MaxInt64)
	s.gates[floodgate.PriorityCritical].stop.Store(math.MaxInt64)
	s.setCapacity(capacity)
	s.done = func(floodgate.Result) { s.inflight.Add(-1) }
	s.tickets.New = func() any {
		t := &ticket{owner: s}
		t.done = t.finish
		return t
	}
	if c.adaptive != nil {
		s.adaptive = *c.adaptive
		s.startAdaptive(s.adaptive, s.meter, capacity)
	}
	return s, nil
}

// setCapacity moves every threshold to its share of capacity.
func (s *Shedder) setCapacity(capacity int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.layout(capacity)
}

// layout sets the capacity and the thresholds; mu held.
func (s *Shedder) layout(capacity int64) {
	s.capacity.Store(capacity)
	for p := floodgate.PriorityTest; p < floodgate.PriorityCritical; p++ {
		s.gates[p].layout(fractionOf(s.thresholds[p], capacity), capacity, s.band)
	}
}

// startAdaptive installs an estimator of settings a starting from
// initial.
func (s *Shedder) startAdaptive(a AdaptiveCapacity, meter CPUMeter, initial int64) {
	initial = min(max(initial, a.Min), a.Max)
	var e *estimator
	e = newEstimator(a, meter, initial, s.clock, func(c int64) { s.setFrom(e, c) })
	s.est.Store(e)
	s.setCapacity(initial)
}

// setFrom sets the capacity e learnt, if e is still the Shedder's
// estimator: requests admitted under an estimator a Reconfigure replaced
// (or dropped, for a fixed capacity) still finish into it, and must not
// move the capacity that replaced it.
func (s *Shedder) setFrom(e *estimator, capacity int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.est.Load() == e {
		s.layout(capacity)
	}
}

// MaxCapacity is the largest capacity (fixed, adaptive bound, or fleet)
// a Shedder or Fleet accepts: 2^53, beyond which capacities and their
// thresholds are no longer exact in the float64 arithmetic that computes
// them (2^63 converted back to int64 became negative, shedding
// everything).
const MaxCapacity = 1 << 53

// fractionOf returns ceil(f*n) computed so that exact decimal fractions
// (0.7 of 100) give the exact count (70), not 71 from rounding error.
func fractionOf(f float64, n int64) int64 {
	v := f * float64(n)
	r := math.Round(v)
	if math.Abs(v-r) < 1e-9 {
		return int64(r)
	}
	return int64(math.Ceil(v))
}

// Capacity returns the capacity in force: the one the Shedder was built
// or reconfigured with, or, with an adaptive capacity, the one it learnt.
func (s *Shedder) Capacity() int64 { return s.capacity.Load() }

// Stats returns a snapshot of the Shedder's capacity and, when it is
// adaptive, what it was learnt from.
func (s *Shedder) Stats() Stats {
	st := Stats{CPU: -1}
	if e := s.est.Load(); e != nil {
		st = e.snapshot()
	}
	st.Capacity = s.Capacity()
	return st
}

// InFlight returns the number of admitted requests that have not called
// their Done yet.
func (s *Shedder) InFlight() int64 { return s.inflight.Load() }

// Admit implements floodgate.Admitter. It never blocks and never returns a
// nil Done with an allow.
func (s *Shedder) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	p, err := s.priority(r)
	e := s.est.Load()
	if p == floodgate.PriorityCritical {
		n := s.inflight.Add(1)
		return s.allow(p, n), s.doneOf(e, n), err
	}
	for {
		n := s.inflight.Load()
		if s.gates[p].shed(n) || s.aboveSheds(p, n) {
			if e != nil {
				e.shed.Add(1)
			}
			return s.shed(p, n), nil, err
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			return s.allow(p, n+1), s.doneOf(e, n+1), err
		}
	}
}

// aboveSheds reports whether a request of a priority above p (critical
// excepted) would be shed with n in flight: then p is shed too, so that
// less important traffic is always shed first. Each gate's hysteresis
// band and hold are its own, and a gate moves only when its priority
// arrives, so a write gate still inside its band (or hold) can be on
// below the read gate's start; its state is read here, not moved.
func (s *Shedder) aboveSheds(p floodgate.Priority, n int64) bool {
	for q := p + 1; q < floodgate.PriorityCritical; q++ {
		if s.gates[q].wouldShed(n) {
			return true
		}
	}
	return false
}

// doneOf returns the Done of a request admitted with inflight requests in
// flight (itself included): the prebuilt one of a fixed capacity, or a
// pooled ticket that times the request for e.
func (s *Shedder) doneOf(e *estimator, inflight int64) floodgate.Done {
	if e == nil {
		return s.done
	}
	t := s.tickets.Get().(*ticket)
	t.e, t.gen, t.inflight, t.start = e, e.gen.Load(), inflight, s.clock.Now()
	return t.done
}

func (s *Shedder) release(t *ticket) {
	s.inflight.Add(-1)
	t.e = nil
	s.tickets.Put(t)
}

// verdicts builds the Decisions of a Shedder or a Fleet.
type verdicts struct {
	capacity        atomic.Int64
	retryAfter      time.Duration
	defaultPriority floodgate.Priority
	policy          string
}

func (v *verdicts) init(c *common, capacity int64) {
	v.retryAfter, v.defaultPriority, v.policy = c.retryAfter, c.defaultPriority, c.policy
	v.capacity.Store(capacity)
}

// resolve returns the priority p is decided at.
func (v *verdicts) resolve(p floodgate.Priority) floodgate.Priority {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return v.defaultPriority
	}
	return p
}

// priority returns the priority r is decided at, with ErrInvalidPriority
// when r carries none of the named ones.
func (v *verdicts) priority(r *floodgate.Request) (floodgate.Priority, error) {
	if !r.Priority.Valid() {
		return v.defaultPriority, ErrInvalidPriority
	}
	return v.resolve(r.Priority), nil
}

// allow is the Decision admitting a request of priority p with inflight
// requests in flight, itself included.
func (v *verdicts) allow(p floodgate.Priority, inflight int64) floodgate.Decision {
	capacity := v.capacity.Load()
	return floodgate.Decision{
		Allowed:   true,
		Stage:     floodgate.StageShedder,
		Source:    floodgate.SourceShedder,
		Limit:     capacity,
		Remaining: max(capacity-inflight, 0),
		Priority:  p,
	}
}

// shed is the Decision shedding a request of priority p with inflight
// requests in flight.
func (v *verdicts) shed(p floodgate.Priority, inflight int64) floodgate.Decision {
	d := v.allow(p, inflight)
	d.Allowed, d.Policy, d.RetryAfter = false, v.policy, v.retryAfter
	return d
}

// gate is the hysteresis state of one shed threshold: shed from start,
// admit again below stop once the hold has passed.
type gate struct {
	// since is 0 while admitting; otherwise, with a hold, the Unix
	// nanosecond time at which in flight was last seen at or above start,
	// and without one, 1.
	since atomic.Int64
	start atomic.Int64 // shed when in flight >= start
	stop  atomic.Int64 // stop shedding when in flight < stop (and the hold passed)
	hold  int64
	clock floodgate.Clock
}

func (g *gate) init(c *common) {
	g.hold = int64(c.hold)
	g.clock = c.timeSource()
}

// layout places the gate at start, with the hysteresis band a share of
// capacity below it.
func (g *gate) layout(start, capacity int64, band float64) {
	g.start.Store(start)
	// At least 1: a class always recovers once nothing is in flight.
	g.stop.Store(max(start-fractionOf(band, capacity), 1))
}

func (g *gate) shedding() bool { return g.since.Load() != 0 }

// shed reports whether a request is shed with n requests in flight, and
// moves the gate's state.
func (g *gate) shed(n int64) bool {
	since := g.since.Load()
	if n >= g.start.Load() {
		// At or above the threshold: shed, and (re)start the hold.
		if g.hold > 0 {
			g.since.Store(g.now())
		} else if since == 0 {
			g.since.Store(1)
		}
		return true
	}
	if since == 0 {
		return false
	}
	if n >= g.stop.Load() {
		return true // inside the hysteresis band
	}
	if g.hold > 0 && g.now()-since < g.hold {
		return true // below the band, but the hold has not passed
	}
	g.since.CompareAndSwap(since, 0)
	return false
}

// wouldShed reports what shed(n) would answer, without moving the gate.
func (g *gate) wouldShed(n int64) bool {
	if n >= g.start.Load() {
		return true
	}
	since := g.since.Load()
	if since == 0 {
		return false
	}
	if n >= g.stop.Load() {
		return true
	}
	return g.hold > 0 && g.now()-since < g.hold
}

// now returns the clock's Unix nanoseconds, never 0 (0 means "admitting").
func (g *gate) now() int64 {
	t := g.clock.Now().UnixNano()
	if t == 0 {
		t = 1
	}
	return t
}
