package shedder

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	done floodgate.Done
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
	apply(&c, &c.common, "Option", opts)
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	s := &Shedder{verdicts: c.verdicts(capacity)}
	for p := floodgate.PriorityTest; p < floodgate.PriorityCritical; p++ {
		s.gates[p].init(fractionOf(c.thresholds[p], capacity), capacity, &c.common)
	}
	s.gates[floodgate.PriorityCritical] = gate{start: math.MaxInt64, stop: math.MaxInt64}
	s.done = func(floodgate.Result) { s.inflight.Add(-1) }
	return s, nil
}

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

// Capacity returns the capacity the Shedder was built with.
func (s *Shedder) Capacity() int64 { return s.capacity }

// InFlight returns the number of admitted requests that have not called
// their Done yet.
func (s *Shedder) InFlight() int64 { return s.inflight.Load() }

// Admit implements floodgate.Admitter. It never blocks and never returns a
// nil Done with an allow.
func (s *Shedder) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	p, err := s.priority(r)
	if p == floodgate.PriorityCritical {
		n := s.inflight.Add(1)
		return s.allow(p, n), s.done, err
	}
	for {
		n := s.inflight.Load()
		if s.gates[p].shed(n) {
			return s.shed(p, n), nil, err
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			return s.allow(p, n+1), s.done, err
		}
	}
}

// verdicts builds the Decisions of a Shedder or a Fleet.
type verdicts struct {
	capacity        int64
	retryAfter      time.Duration
	defaultPriority floodgate.Priority
	policy          string
}

func (c *common) verdicts(capacity int64) verdicts {
	return verdicts{capacity: capacity, retryAfter: c.retryAfter, defaultPriority: c.defaultPriority, policy: c.policy}
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
	return floodgate.Decision{
		Allowed:   true,
		Stage:     floodgate.StageShedder,
		Source:    floodgate.SourceShedder,
		Limit:     v.capacity,
		Remaining: max(v.capacity-inflight, 0),
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
	start int64 // shed when in flight >= start
	stop  int64 // stop shedding when in flight < stop (and the hold passed)
	hold  int64
	clock floodgate.Clock
}

func (g *gate) init(start, capacity int64, c *common) {
	g.start = start
	// At least 1: a class always recovers once nothing is in flight.
	g.stop = max(start-fractionOf(c.hysteresis, capacity), 1)
	g.hold = int64(c.hold)
	g.clock = c.timeSource()
}

func (g *gate) shedding() bool { return g.since.Load() != 0 }

// shed reports whether a request is shed with n requests in flight, and
// moves the gate's state.
func (g *gate) shed(n int64) bool {
	since := g.since.Load()
	if n >= g.start {
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
	if n >= g.stop {
		return true // inside the hysteresis band
	}
	if g.hold > 0 && g.now()-since < g.hold {
		return true // below the band, but the hold has not passed
	}
	g.since.CompareAndSwap(since, 0)
	return false
}

// now returns the clock's Unix nanoseconds, never 0 (0 means "admitting").
func (g *gate) now() int64 {
	t := g.clock.Now().UnixNano()
	if t == 0 {
		t = 1
	}
	return t
}
