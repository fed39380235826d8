package shedder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/fair"
	"github.com/floodgate-go/floodgate/internal/reqctx"
	"github.com/floodgate-go/floodgate/shedder/internal/core"
)

// Default settings of a Shedder and of its AdaptiveCapacity, and the
// largest capacity.
const (
	// DefaultTestThreshold is the share of capacity from which test traffic is shed.
	DefaultTestThreshold = 0.70
	// DefaultReadThreshold is the share of capacity from which reads are shed.
	DefaultReadThreshold = 0.80
	// DefaultWriteThreshold is the share of capacity from which writes are shed.
	DefaultWriteThreshold = 0.90
	// DefaultHysteresis is the band, a share of capacity, below a threshold
	// that in flight must reach before shedding stops.
	DefaultHysteresis = core.DefaultHysteresis
	// DefaultRetryAfter is the RetryAfter of a shed Decision.
	DefaultRetryAfter = core.DefaultRetryAfter
	// DefaultPriority is the priority of a request whose Priority is
	// PriorityUnspecified.
	DefaultPriority = core.DefaultPriority
	// DefaultPolicy is the Policy of a Shedder's shed Decisions.
	DefaultPolicy = "shedder"
	// DefaultRetryMargin is the Margin of Retries: retries are shed from
	// 5% of capacity below their priority's threshold.
	DefaultRetryMargin = 0.05
	// RetriesPolicySuffix follows the Policy of a Shedder's Decisions on
	// the retries it sheds before first attempts (WithRetries).
	RetriesPolicySuffix = core.RetriesPolicySuffix
	// DeadlinePolicySuffix follows the Policy of an adaptive Shedder's
	// Decisions on requests whose deadline is nearer than the least
	// latency it has seen: they cannot finish in time.
	DeadlinePolicySuffix = core.DeadlinePolicySuffix
	// FairnessPolicySuffix follows the Policy of a Shedder's Decisions on
	// the requests it sheds, under Config.Fairness, because their caller
	// holds its share of their priority's room.
	FairnessPolicySuffix = core.FairnessPolicySuffix

	// The defaults of AdaptiveCapacity's fields.
	DefaultAdaptiveWindow     = core.DefaultAdaptiveWindow
	DefaultAdaptiveMinSamples = core.DefaultAdaptiveMinSamples
	DefaultAdaptiveHistory    = core.DefaultAdaptiveHistory
	DefaultAdaptiveProbe      = core.DefaultAdaptiveProbe
	DefaultAdaptiveTolerance  = core.DefaultAdaptiveTolerance
	DefaultAdaptiveHeadroom   = core.DefaultAdaptiveHeadroom
	DefaultAdaptiveGrowth     = core.DefaultAdaptiveGrowth
	DefaultAdaptiveBackoff    = core.DefaultAdaptiveBackoff
	DefaultAdaptiveMax        = core.DefaultAdaptiveMax

	// MaxCapacity is the largest capacity (fixed, adaptive bound, or
	// fleet) a shedder accepts: 2^53, beyond which capacities and their
	// thresholds are no longer exact in the float64 arithmetic that
	// computes them (2^63 converted back to int64 became negative,
	// shedding everything).
	MaxCapacity = core.MaxCapacity
)

// ErrInvalidPriority is returned, with a decision taken at the default
// priority, when a Request carries a Priority value outside the named ones.
var ErrInvalidPriority = core.ErrInvalidPriority

// Shedder is the worker-utilisation load shedder, a floodgate.Admitter. See
// the package documentation for what it decides. It is safe for concurrent
// use.
type Shedder struct {
	inflight atomic.Int64
	gates    [floodgate.NumPriorities]core.Gate // critical's is never consulted
	retry    [floodgate.NumPriorities]core.Gate // retries' gates (WithRetries)
	retries  atomic.Pointer[retrySet]           // nil: retries are shed as first attempts
	fair     fair.InForce                       // Config.Fairness
	v        core.Verdicts
	done     floodgate.Done                 // the Done of a fixed capacity
	est      atomic.Pointer[core.Estimator] // nil: the capacity is fixed
	tickets  sync.Pool                      // *core.Ticket, adaptive capacity
	clock    floodgate.Clock

	mu         sync.Mutex // serialises capacity and threshold changes
	thresholds [floodgate.NumPriorities]float64
	margin     float64 // the retries' margin; 0 while off
	band       float64
	fixed      int64 // the capacity Config reports
	adaptive   AdaptiveCapacity
	meter      core.CPUMeter // WithCPU's, or the last AdaptiveCapacity.CPU
	mem        core.CPUMeter // the last AdaptiveCapacity.Memory
}

var _ floodgate.Admitter = (*Shedder)(nil)

// New returns a Shedder for an instance sized for capacity requests in
// flight (capacity >= 1). It returns an error naming every bad option.
func New(capacity int64, opts ...Option) (*Shedder, error) {
	c := config{Settings: core.NewSettings("shedder", DefaultPolicy)}
	c.thresholds[floodgate.PriorityTest] = DefaultTestThreshold
	c.thresholds[floodgate.PriorityRead] = DefaultReadThreshold
	c.thresholds[floodgate.PriorityWrite] = DefaultWriteThreshold
	if capacity < 1 {
		c.Errorf("capacity %d must be at least 1", capacity)
	}
	if capacity > MaxCapacity {
		c.Errorf("capacity %d must be at most MaxCapacity (%d)", capacity, int64(MaxCapacity))
	}
	core.Apply(&c, &c.Settings, "Option", opts)
	if c.retries != nil {
		for _, e := range c.retries.check(c.thresholds) {
			c.Fail("WithRetries", "%s", e.Error())
		}
	}
	if c.adaptive != nil && c.adaptive.CPUTarget > 0 && c.meter == nil {
		c.Fail("WithAdaptiveCapacity", "AdaptiveCapacity.CPUTarget %v needs a CPU meter (AdaptiveCapacity.CPU or WithCPU)", c.adaptive.CPUTarget)
	}
	if c.adaptive != nil && c.adaptive.MemoryTarget > 0 && c.mem == nil {
		c.Fail("WithAdaptiveCapacity", "AdaptiveCapacity.MemoryTarget %v needs a memory meter (AdaptiveCapacity.Memory)", c.adaptive.MemoryTarget)
	}
	if len(c.Errs) > 0 {
		return nil, errors.Join(c.Errs...)
	}
	s := &Shedder{thresholds: c.thresholds, band: c.Hysteresis, fixed: capacity, clock: c.TimeSource(), meter: c.meter, mem: c.mem}
	for p := floodgate.PriorityTest; p < floodgate.PriorityCritical; p++ {
		s.gates[p].Init(&c.Settings)
		s.retry[p].Init(&c.Settings)
	}
	s.v.Init(&c.Settings, capacity)
	s.gates[floodgate.PriorityCritical].Close()
	s.retry[floodgate.PriorityCritical].Close()
	s.setRetries(c.retries)
	s.setCapacity(capacity)
	s.done = func(floodgate.Result) { s.inflight.Add(-1) }
	s.tickets.New = func() any { return core.NewTicket(s.release) }
	if c.adaptive != nil {
		s.adaptive = *c.adaptive
		s.startAdaptive(s.adaptive, s.meter, s.mem, capacity)
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
	s.v.Capacity.Store(capacity)
	for p := floodgate.PriorityTest; p < floodgate.PriorityCritical; p++ {
		s.gates[p].Layout(core.FractionOf(s.thresholds[p], capacity), capacity, s.band)
		if s.margin > 0 {
			s.retry[p].Layout(max(1, core.FractionOf(s.thresholds[p]-s.margin, capacity)), capacity, s.band)
		}
	}
}

// setRetries installs r (nil: off); mu held, or s not shared yet. The
// gates are laid out by the next layout.
func (s *Shedder) setRetries(r *Retries) {
	old := s.retries.Load()
	rs := newRetrySet(r)
	if rs != nil && old != nil && rs.attempt == old.attempt {
		rs.headers = old.headers // the same slice: the transport keeps its copy
	}
	s.margin = 0
	if rs != nil {
		s.margin = rs.margin
	}
	s.retries.Store(rs)
}

// RequireScopes is told by the transport (package interceptor) which
// identities it fills: with strict (WithStrictIdentity, and package
// guard), a Config whose Fairness is by an identity not among them is an
// error, now and at every Reconfigure, for it would count every request
// as one caller's.
func (s *Shedder) RequireScopes(transport string, resolvable []string, strict bool) error {
	if err := s.fair.Require(resolvable, strict); err != nil {
		return fmt.Errorf("shedder: fairness.%w", err)
	}
	return nil
}

// startAdaptive installs an estimator of settings a starting from
// initial.
func (s *Shedder) startAdaptive(a AdaptiveCapacity, meter, mem core.CPUMeter, initial int64) {
	initial = min(max(initial, a.Min), a.Max)
	var e *core.Estimator
	e = core.NewEstimator(core.Adaptive(a), meter, mem, initial, s.clock, func(c int64) { s.setFrom(e, c) })
	s.est.Store(e)
	s.setCapacity(initial)
}

// setFrom sets the capacity e learnt, if e is still the Shedder's
// estimator: requests admitted under an estimator a Reconfigure replaced
// (or dropped, for a fixed capacity) still finish into it, and must not
// move the capacity that replaced it.
func (s *Shedder) setFrom(e *core.Estimator, capacity int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.est.Load() == e {
		s.layout(capacity)
	}
}

// Capacity returns the capacity in force: the one the Shedder was built
// or reconfigured with, or, with an adaptive capacity, the one it learnt.
func (s *Shedder) Capacity() int64 { return s.v.Capacity.Load() }

// Stats returns a snapshot of the Shedder's capacity and, when it is
// adaptive, what it was learnt from.
func (s *Shedder) Stats() Stats {
	st := Stats{CPU: -1, Memory: -1}
	if e := s.est.Load(); e != nil {
		st = Stats(e.Snapshot())
	}
	st.Capacity = s.Capacity()
	return st
}

// InFlight returns the number of admitted requests that have not called
// their Done yet.
func (s *Shedder) InFlight() int64 { return s.inflight.Load() }

// Admit implements floodgate.Admitter. It never blocks and never returns a
// nil Done with an allow.
func (s *Shedder) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	p, err := s.v.Priority(r)
	e := s.est.Load()
	if p == floodgate.PriorityCritical {
		n := s.inflight.Add(1)
		return s.v.Allow(p, n), s.doneOf(ctx, e, p, n, time.Time{}), err
	}
	var now time.Time // read once, for the deadline and the ticket
	if least := e.Least(); least > 0 {
		if dl, ok := ctx.Deadline(); ok {
			if now = s.clock.Now(); dl.Sub(now) < least {
				// It cannot finish before its deadline even at the least
				// latency: work nobody would read. Not counted as shed
				// for want of capacity (Shed), which grows the capacity.
				return s.v.ShedLate(p, s.inflight.Load()), nil, err
			}
		}
	}
	g := &s.gates[p]
	retry := false
	if rs := s.retries.Load(); rs != nil && rs.isRetry(r) {
		g, retry = &s.retry[p], true
	}
	fs := s.fair.Share()
	for {
		n := s.inflight.Load()
		if g.Shed(n) || s.aboveSheds(p, n) {
			over := false
			if fs != nil {
				var in bool
				if in, over = s.fairlyIn(fs, r, g, p, n); in {
					if !s.inflight.CompareAndSwap(n, n+1) {
						continue
					}
					return s.v.Allow(p, n+1), fs.Hold(r, s.doneOf(ctx, e, p, n+1, now)), err
				}
			}
			if e != nil {
				e.Shed.Add(1)
			}
			switch {
			case retry:
				return s.v.ShedRetry(p, n), nil, err
			case over:
				return s.v.ShedUnfair(p, n), nil, err
			}
			return s.v.Shed(p, n), nil, err
		}
		if fs != nil {
			if room, _ := g.Bounds(); !fs.Admits(r, room, false) {
				return s.v.ShedUnfair(p, n), nil, err // over its share: held to it
			}
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			return s.v.Allow(p, n+1), fs.Hold(r, s.doneOf(ctx, e, p, n+1, now)), err
		}
	}
}

// fairlyIn reports whether a request of priority p, which gate g (its
// own) sheds with n in flight, is let in by fairness: no more important
// priority sheds, n is below the next priority's threshold (or the
// capacity, for writes), and its caller holds less than its share of g's
// room (floodgate.Fairness). over reports that the caller's share alone
// kept it out.
func (s *Shedder) fairlyIn(fs *fair.Share, r *floodgate.Request, g *core.Gate, p floodgate.Priority, n int64) (in, over bool) {
	ceiling := s.v.Capacity.Load()
	if p+1 < floodgate.PriorityCritical {
		ceiling, _ = s.gates[p+1].Bounds()
	}
	if n >= ceiling || s.aboveSheds(p, n) {
		return false, false
	}
	room, _ := g.Bounds()
	in = fs.Admits(r, room, true)
	return in, !in
}

// aboveSheds reports whether a request of a priority above p (critical
// excepted) would be shed with n in flight: then p is shed too, so that
// less important traffic is always shed first. Each gate's hysteresis
// band and hold are its own, and a gate moves only when its priority
// arrives, so a write gate still inside its band (or hold) can be on
// below the read gate's start; its state is read here, not moved.
func (s *Shedder) aboveSheds(p floodgate.Priority, n int64) bool {
	for q := p + 1; q < floodgate.PriorityCritical; q++ {
		if s.gates[q].WouldShed(n) {
			return true
		}
	}
	return false
}

// doneOf returns the Done of a request of priority p admitted with
// inflight requests in flight (itself included): the prebuilt one of a
// fixed capacity, or a pooled ticket that times the request for e.
func (s *Shedder) doneOf(ctx context.Context, e *core.Estimator, p floodgate.Priority, inflight int64, now time.Time) floodgate.Done {
	if e == nil {
		return s.done
	}
	t := s.tickets.Get().(*core.Ticket)
	t.Start(e, p, inflight, reqctx.Wait(ctx), now)
	return t.Done
}

func (s *Shedder) release(t *core.Ticket) {
	s.inflight.Add(-1)
	s.tickets.Put(t)
}
