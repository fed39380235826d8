package core

import (
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// MaxCapacity is the largest capacity (fixed, adaptive bound, or fleet)
// a shedder accepts: 2^53, beyond which capacities and their thresholds
// are no longer exact in the float64 arithmetic that computes them.
const MaxCapacity = 1 << 53

// ErrInvalidPriority is returned, with a decision taken at the default
// priority, when a Request carries a Priority value outside the named ones.
var ErrInvalidPriority = errors.New("shedder: request priority is not a known priority; the default priority was used")

// FractionOf returns ceil(f*n) computed so that exact decimal fractions
// (0.7 of 100) give the exact count (70), not 71 from rounding error.
func FractionOf(f float64, n int64) int64 {
	v := f * float64(n)
	r := math.Round(v)
	if math.Abs(v-r) < 1e-9 {
		return int64(r)
	}
	return int64(math.Ceil(v))
}

// Verdicts builds the Decisions of a shedder.
type Verdicts struct {
	Capacity        atomic.Int64 // the capacity in force: a Decision's Limit
	retryAfter      time.Duration
	defaultPriority floodgate.Priority
	policy          string
	retryPolicy     string // policy + ".retries"
	latePolicy      string // policy + ".deadline"
	fairPolicy      string // policy + ".fairness"
}

// Init takes the settings of s and the starting capacity.
func (v *Verdicts) Init(s *Settings, capacity int64) {
	v.retryAfter, v.defaultPriority, v.policy = s.RetryAfter, s.DefaultPriority, s.Policy
	v.retryPolicy = s.Policy + RetriesPolicySuffix
	v.latePolicy = s.Policy + DeadlinePolicySuffix
	v.fairPolicy = s.Policy + FairnessPolicySuffix
	v.Capacity.Store(capacity)
}

// Resolve returns the priority p is decided at.
func (v *Verdicts) Resolve(p floodgate.Priority) floodgate.Priority {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return v.defaultPriority
	}
	return p
}

// Priority returns the priority r is decided at, with ErrInvalidPriority
// when r carries none of the named ones.
func (v *Verdicts) Priority(r *floodgate.Request) (floodgate.Priority, error) {
	if !r.Priority.Valid() {
		return v.defaultPriority, ErrInvalidPriority
	}
	return v.Resolve(r.Priority), nil
}

// Allow is the Decision admitting a request of priority p with inflight
// requests in flight, itself included.
func (v *Verdicts) Allow(p floodgate.Priority, inflight int64) floodgate.Decision {
	capacity := v.Capacity.Load()
	return floodgate.Decision{
		Allowed:   true,
		Stage:     floodgate.StageShedder,
		Source:    floodgate.SourceShedder,
		Limit:     capacity,
		Remaining: max(capacity-inflight, 0),
		Priority:  p,
	}
}

// Shed is the Decision shedding a request of priority p with inflight
// requests in flight.
func (v *Verdicts) Shed(p floodgate.Priority, inflight int64) floodgate.Decision {
	d := v.Allow(p, inflight)
	d.Allowed, d.Policy, d.RetryAfter = false, v.policy, v.retryAfter
	return d
}

// Suffixes of the Policy of a shed retry (ShedRetry), of a request shed
// because its deadline is nearer than the least latency (ShedLate) and of
// one shed under fairness (ShedUnfair).
const (
	RetriesPolicySuffix  = ".retries"
	DeadlinePolicySuffix = ".deadline"
	FairnessPolicySuffix = ".fairness"
)

// ShedUnfair is the Decision shedding a request of priority p whose
// caller holds its share of p's room or more (floodgate.Fairness), with
// inflight requests in flight.
func (v *Verdicts) ShedUnfair(p floodgate.Priority, inflight int64) floodgate.Decision {
	d := v.Shed(p, inflight)
	d.Policy = v.fairPolicy
	return d
}

// ShedRetry is the Decision shedding a retry of priority p, before first
// attempts of p, with inflight requests in flight.
func (v *Verdicts) ShedRetry(p floodgate.Priority, inflight int64) floodgate.Decision {
	d := v.Shed(p, inflight)
	d.Policy = v.retryPolicy
	return d
}

// ShedLate is the Decision shedding a request of priority p whose
// deadline is nearer than the least latency, with inflight requests in
// flight: no retry could be sooner than its deadline, so RetryAfter is 0.
func (v *Verdicts) ShedLate(p floodgate.Priority, inflight int64) floodgate.Decision {
	d := v.Shed(p, inflight)
	d.Policy, d.RetryAfter = v.latePolicy, 0
	return d
}

// Gate is the hysteresis state of one shed threshold: shed from start,
// admit again below stop once the hold has passed.
type Gate struct {
	// since is 0 while admitting; otherwise, with a hold, the Unix
	// nanosecond time at which in flight was last seen at or above start,
	// and without one, 1.
	since atomic.Int64
	start atomic.Int64 // shed when in flight >= start
	stop  atomic.Int64 // stop shedding when in flight < stop (and the hold passed)
	hold  int64
	clock floodgate.Clock
}

// Init takes the hold of s and the clock it is read from.
func (g *Gate) Init(s *Settings) {
	g.hold = int64(s.Hold)
	g.clock = s.TimeSource()
}

// Layout places the gate at start, with the hysteresis band a share of
// capacity below it.
func (g *Gate) Layout(start, capacity int64, band float64) {
	g.start.Store(start)
	// At least 1: a class always recovers once nothing is in flight.
	g.stop.Store(max(start-FractionOf(band, capacity), 1))
}

// Close makes the gate never shed (critical traffic).
func (g *Gate) Close() {
	g.start.Store(math.MaxInt64)
	g.stop.Store(math.MaxInt64)
}

// Bounds returns the in-flight count from which the gate sheds, and the
// count below which it stops shedding.
func (g *Gate) Bounds() (start, stop int64) { return g.start.Load(), g.stop.Load() }

// Shedding reports whether the gate is in its shedding state.
func (g *Gate) Shedding() bool { return g.since.Load() != 0 }

// Shed reports whether a request is shed with n requests in flight, and
// moves the gate's state.
func (g *Gate) Shed(n int64) bool {
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

// WouldShed reports what Shed(n) would answer, without moving the gate.
func (g *Gate) WouldShed(n int64) bool {
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
func (g *Gate) now() int64 {
	t := g.clock.Now().UnixNano()
	if t == 0 {
		t = 1
	}
	return t
}
