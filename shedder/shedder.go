// Package shedder is floodgate's priority load shedder: when this instance
// (Shedder) or the whole fleet (Fleet) is near capacity, it drops the least
// important traffic first, Stripe style.
//
// What this package decides: whether a request of a given priority is shed
// now, given how many requests are in flight. It does not resolve priority —
// the interceptor does that (per-method annotation, then the policy, then a
// trusted header, then the HTTP method) and stores it in Request.Priority;
// PriorityUnspecified takes the shedder's default priority, PriorityWrite
// unless WithDefaultPriority says otherwise (an unannotated call may change
// state, and every non-GET HTTP method already maps to write).
//
// # Worker-utilisation shedder (Shedder)
//
// A Shedder counts the requests it admitted and that have not yet called
// their Done (in flight) against a capacity. Each priority below critical has
// a threshold, a fraction of capacity: by default test 0.70, read 0.80,
// write 0.90. Critical is never shed. With capacity 100 a test request is
// shed when 70 or more requests are in flight, a read from 80, a write from
// 90. A shed Decision has Allowed false, Policy "shedder", Limit = capacity,
// Remaining = capacity minus in flight (at least 0) and RetryAfter (1s unless
// WithRetryAfter says otherwise); transports turn it into UNAVAILABLE / 503
// with Retry-After.
//
// Shedding starts and stops with hysteresis so that a load hovering around a
// threshold does not flap: a priority starts being shed when in flight
// reaches its threshold, and stops only when in flight has fallen below
// threshold − band (band = 5% of capacity, rounded up: with capacity 100,
// test is shed from 70 and admitted again below 65; never below 1, so a
// class always recovers once nothing is in flight). WithHysteresis can add
// a hold: shedding then also lasts at least that long after in flight was
// last seen at or above the threshold. The hold is off by default because,
// under closed-loop overload, it costs goodput: every time it expires the
// waiting clients rush in, cross the threshold and start another full hold
// (BenchmarkOverload with a 1s hold served 0.2% of non-critical requests at
// 3x load; with the band alone it keeps the workers busy with writes).
//
// The hold is read from the Clock (WithClock), so tests drive it on fake
// time. The Clock is read only while a priority is being shed with a hold
// configured: an admitted request costs one atomic compare-and-swap and no
// allocation. Done is prebuilt once; the transport must call it exactly once
// per admitted request (floodgate's interceptors do, by defer): a second call
// would release a slot that another request holds.
//
// # Fleet-usage shedder (Fleet)
//
// See Fleet: it reserves a share of the fleet's in-flight capacity (20% by
// default) for critical traffic, with per-instance counts published to Redis.
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
	// DefaultHold is the least time shedding lasts: none.
	DefaultHold = time.Duration(0)
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

// Option configures New and NewFleet. Options that make no sense for one of
// them make it return an error naming the option.
type Option func(*options)

type options struct {
	thresholds      [floodgate.NumPriorities]float64
	hysteresis      float64
	hold            time.Duration
	retryAfter      time.Duration
	defaultPriority floodgate.Priority
	clock           floodgate.Clock
	policy          string
	errs            []error

	shedderOnly []string // options given that only New accepts
	fleetOnly   []string // options given that only NewFleet accepts

	// Fleet only.
	reserve  float64
	instance string
	prefix   string
	ttl      time.Duration
	interval time.Duration
	timeout  time.Duration
}

func (o *options) fail(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf("shedder: "+format, args...))
}

// WithThresholds sets the fraction of capacity at which test, read and write
// traffic starts being shed. Each must be in (0, 1] and test <= read <= write,
// so less important traffic is always shed first.
func WithThresholds(test, read, write float64) Option {
	return func(o *options) {
		o.shedderOnly = append(o.shedderOnly, "WithThresholds")
		o.thresholds[floodgate.PriorityTest] = test
		o.thresholds[floodgate.PriorityRead] = read
		o.thresholds[floodgate.PriorityWrite] = write
	}
}

// WithHysteresis sets the band, a fraction of capacity in [0, 0.5), by which
// in flight must fall below a threshold before shedding stops (default
// 0.05), and the hold, the least time (>= 0) shedding lasts after in flight
// was last at or above the threshold (default 0: no hold).
// WithHysteresis(0, 0) turns hysteresis off. It applies to New and NewFleet
// (where the band is a fraction of fleet capacity).
func WithHysteresis(band float64, hold time.Duration) Option {
	return func(o *options) {
		if math.IsNaN(band) || band < 0 || band >= 0.5 {
			o.fail("hysteresis band %v is out of range [0, 0.5)", band)
		}
		if hold < 0 {
			o.fail("hysteresis hold %s is negative", hold)
		}
		o.hysteresis, o.hold = band, hold
	}
}

// WithRetryAfter sets the RetryAfter of a shed Decision; it must be > 0.
func WithRetryAfter(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.fail("retry-after %s must be positive", d)
		}
		o.retryAfter = d
	}
}

// WithDefaultPriority sets the priority used for requests whose Priority is
// PriorityUnspecified. It must be a named priority other than unspecified.
func WithDefaultPriority(p floodgate.Priority) Option {
	return func(o *options) {
		if p == floodgate.PriorityUnspecified || !p.Valid() {
			o.fail("default priority %v is not one of critical, write, read, test", p)
		}
		o.defaultPriority = p
	}
}

// WithClock sets the Clock the shedder reads time from (SystemClock by
// default). For Fleet it also makes the Redis script take its time from
// this Clock instead of Redis TIME, so tests can run on fake time.
func WithClock(c floodgate.Clock) Option {
	return func(o *options) {
		if c == nil {
			o.fail("clock is nil")
		}
		o.clock = c
	}
}

// WithPolicy sets the Policy name of shed Decisions ("shedder" by default,
// "fleet-shedder" for Fleet).
func WithPolicy(name string) Option {
	return func(o *options) {
		if name == "" {
			o.fail("policy name is empty")
		}
		o.policy = name
	}
}

func defaultOptions() options {
	o := options{
		hysteresis:      DefaultHysteresis,
		hold:            DefaultHold,
		retryAfter:      DefaultRetryAfter,
		defaultPriority: DefaultPriority,
		clock:           floodgate.SystemClock,
		policy:          DefaultPolicy,
	}
	o.thresholds[floodgate.PriorityTest] = DefaultTestThreshold
	o.thresholds[floodgate.PriorityRead] = DefaultReadThreshold
	o.thresholds[floodgate.PriorityWrite] = DefaultWriteThreshold
	return o
}

// Shedder is the worker-utilisation load shedder, a floodgate.Admitter. See
// the package documentation for what it decides. It is safe for concurrent
// use.
type Shedder struct {
	inflight atomic.Int64
	gates    [floodgate.NumPriorities]gate // critical's is never consulted

	capacity        int64
	retryAfter      time.Duration
	defaultPriority floodgate.Priority
	policy          string
	done            floodgate.Done
}

var _ floodgate.Admitter = (*Shedder)(nil)

// New returns a Shedder for an instance sized for capacity requests in
// flight (capacity >= 1). It returns an error naming every bad option.
func New(capacity int64, opts ...Option) (*Shedder, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	var errs []error
	if capacity < 1 {
		errs = append(errs, fmt.Errorf("shedder: capacity %d must be at least 1", capacity))
	}
	errs = append(errs, o.errs...)
	if len(o.fleetOnly) > 0 {
		errs = append(errs, fmt.Errorf("shedder: options %v apply only to NewFleet", o.fleetOnly))
	}
	errs = append(errs, validateThresholds(o.thresholds)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Shedder{
		capacity:        capacity,
		retryAfter:      o.retryAfter,
		defaultPriority: o.defaultPriority,
		policy:          o.policy,
	}
	for p := floodgate.PriorityTest; p < floodgate.PriorityCritical; p++ {
		s.gates[p].init(fractionOf(o.thresholds[p], capacity), capacity, o)
	}
	s.gates[floodgate.PriorityCritical] = gate{start: math.MaxInt64, stop: math.MaxInt64}
	s.done = func() { s.inflight.Add(-1) }
	return s, nil
}

func validateThresholds(t [floodgate.NumPriorities]float64) []error {
	var errs []error
	for p := floodgate.PriorityTest; p < floodgate.PriorityCritical; p++ {
		if v := t[p]; math.IsNaN(v) || v <= 0 || v > 1 {
			errs = append(errs, fmt.Errorf("shedder: %s threshold %v is out of range (0, 1]", p, v))
		}
	}
	if len(errs) == 0 && (t[floodgate.PriorityTest] > t[floodgate.PriorityRead] || t[floodgate.PriorityRead] > t[floodgate.PriorityWrite]) {
		errs = append(errs, fmt.Errorf("shedder: thresholds test %v, read %v, write %v must satisfy test <= read <= write",
			t[floodgate.PriorityTest], t[floodgate.PriorityRead], t[floodgate.PriorityWrite]))
	}
	return errs
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

// Threshold returns the in-flight count at which priority p starts being
// shed, and the count below which shedding may stop. For critical (never
// shed) both are math.MaxInt64. PriorityUnspecified reports the default
// priority's thresholds.
func (s *Shedder) Threshold(p floodgate.Priority) (start, stop int64) {
	p = s.resolve(p)
	return s.gates[p].start, s.gates[p].stop
}

// Shedding reports whether priority p is currently in the shedding state.
func (s *Shedder) Shedding(p floodgate.Priority) bool {
	return s.gates[s.resolve(p)].shedding()
}

func (s *Shedder) resolve(p floodgate.Priority) floodgate.Priority {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return s.defaultPriority
	}
	return p
}

// Admit implements floodgate.Admitter. It never blocks and never returns a
// nil Done with an allow.
func (s *Shedder) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	var err error
	p := r.Priority
	if !p.Valid() {
		err = ErrInvalidPriority
	}
	p = s.resolve(p)
	if p == floodgate.PriorityCritical {
		n := s.inflight.Add(1)
		return s.allow(p, n), s.done, err
	}
	for {
		n := s.inflight.Load()
		if s.gates[p].shed(n) {
			return floodgate.Decision{
				Allowed:    false,
				Stage:      floodgate.StageShedder,
				Source:     floodgate.SourceShedder,
				Policy:     s.policy,
				Limit:      s.capacity,
				Remaining:  max(s.capacity-n, 0),
				RetryAfter: s.retryAfter,
				Priority:   p,
			}, nil, err
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			return s.allow(p, n+1), s.done, err
		}
	}
}

func (s *Shedder) allow(p floodgate.Priority, n int64) floodgate.Decision {
	return floodgate.Decision{
		Allowed:   true,
		Stage:     floodgate.StageShedder,
		Source:    floodgate.SourceShedder,
		Limit:     s.capacity,
		Remaining: max(s.capacity-n, 0),
		Priority:  p,
	}
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

func (g *gate) init(start, capacity int64, o options) {
	g.start = start
	// At least 1: a class always recovers once nothing is in flight.
	g.stop = max(start-fractionOf(o.hysteresis, capacity), 1)
	g.hold = int64(o.hold)
	g.clock = o.clock
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
