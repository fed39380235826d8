package core

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/field"
)

// CPUMeter reports the CPU the service used since the previous call, as a
// share of the CPU it may use (1 = the whole quota).
type CPUMeter interface {
	Utilization() (float64, error)
}

// Defaults of Adaptive.
const (
	DefaultAdaptiveWindow     = 100 * time.Millisecond
	DefaultAdaptiveMinSamples = 10
	DefaultAdaptiveHistory    = 50
	DefaultAdaptiveProbe      = 10 * time.Second
	DefaultAdaptiveTolerance  = 1.5
	DefaultAdaptiveHeadroom   = 1.25
	DefaultAdaptiveGrowth     = 0.1
	DefaultAdaptiveBackoff    = 0.9
	DefaultAdaptiveMax        = 10_000
	// probeShare is the share of the capacity a probe window runs at.
	probeShare = 0.5
)

// Adaptive is shedder.AdaptiveCapacity, field for field (the two convert
// into each other); its documentation is there.
type Adaptive struct {
	// Min is the floor of the capacity; 0 means 1. It must be >= 1.
	Min int64
	// Max is the ceiling of the capacity; 0 means DefaultAdaptiveMax. It
	// must be >= Min.
	Max int64
	// Window is the least time between capacity moves; 0 means 100ms. It
	// must not be negative.
	Window time.Duration
	// MinSamples is the least number of finished requests a window needs;
	// 0 means 10. It must not be negative.
	MinSamples int
	// History is how many windows the highest throughput is taken over;
	// 0 means 50 (five seconds of 100ms windows). It must not be negative.
	History int
	// Probe is how long the least latency is trusted: when no window has
	// been as fast for Probe, the capacity is halved for two windows (one
	// to drain, one to measure the requests admitted after it) to
	// measure it again; 0 means 10s. It must not be negative.
	Probe time.Duration
	// Tolerance is how far above the least latency a window's mean
	// latency may rise before the service counts as overloaded; 0 means
	// 1.5. It must be a finite number > 1.
	Tolerance float64
	// Headroom multiplies the Little's law estimate to give the capacity
	// of an overloaded service; 0 means 1.25. It must be a finite number
	// >= 1.
	Headroom float64
	// Growth is the share by which the capacity grows after a window that
	// shed requests while the service was healthy; 0 means 0.1. It must
	// lie in (0, 1].
	Growth float64
	// Backoff multiplies the capacity after an overloaded window (the
	// capacity is then also at most the Little's law estimate times
	// Headroom); 0 means 0.9. It must lie in [0.5, 1).
	Backoff float64
	// CPUTarget, when above 0, counts the service as overloaded when the
	// CPU it used over a window is at least this share of its quota (0.9:
	// 90%); it needs a CPU meter (CPU below, or the Shedder's WithCPU).
	// 0, the default, leaves CPU out. It must lie in [0, 1].
	CPUTarget float64
	// CPU is the meter CPUTarget is checked against; nil keeps the one
	// given to WithCPU, or the one set before.
	CPU interface{ Utilization() (float64, error) }
	// MemoryTarget, when above 0, counts the service as overloaded when
	// the memory it holds at the end of a window is at least this share
	// of its limit; it needs a memory meter (Memory below). 0, the
	// default, leaves memory out. It must lie in [0, 1].
	MemoryTarget float64
	// Memory is the meter MemoryTarget is checked against; nil keeps the
	// one set before.
	Memory interface{ Utilization() (float64, error) }
}

// WithDefaults returns a with every zero field set to its default.
func (a Adaptive) WithDefaults() Adaptive {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&a.Min, 1)
	def(&a.Max, DefaultAdaptiveMax)
	if a.Window == 0 {
		a.Window = DefaultAdaptiveWindow
	}
	if a.MinSamples == 0 {
		a.MinSamples = DefaultAdaptiveMinSamples
	}
	if a.History == 0 {
		a.History = DefaultAdaptiveHistory
	}
	if a.Probe == 0 {
		a.Probe = DefaultAdaptiveProbe
	}
	if a.Tolerance == 0 {
		a.Tolerance = DefaultAdaptiveTolerance
	}
	if a.Headroom == 0 {
		a.Headroom = DefaultAdaptiveHeadroom
	}
	if a.Growth == 0 {
		a.Growth = DefaultAdaptiveGrowth
	}
	if a.Backoff == 0 {
		a.Backoff = DefaultAdaptiveBackoff
	}
	return a
}

// Check reports the bad fields of a (defaults applied) under option, each
// a *field.Error named by its policy file key under parent
// ("<pkg>: <option>: adaptive.max: <problem>"; see Wrap).
func (a Adaptive) Check(pkg, option, parent string) []error {
	var errs []*field.Error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	if a.Min < 1 {
		bad("min", "%d must be >= 1", a.Min)
	}
	if a.Max < a.Min {
		bad("max", "%d must be >= min %d", a.Max, a.Min)
	}
	if a.Max > MaxCapacity {
		bad("max", "%d must be <= %d (MaxCapacity)", a.Max, int64(MaxCapacity))
	}
	if a.Window < 0 {
		bad("window", "%s is negative", a.Window)
	}
	if a.MinSamples < 0 {
		bad("min_samples", "%d is negative", a.MinSamples)
	}
	if a.History < 0 {
		bad("history", "%d is negative", a.History)
	}
	if a.Probe < 0 {
		bad("probe", "%s is negative", a.Probe)
	}
	if !(a.Tolerance > 1) || math.IsInf(a.Tolerance, 0) {
		bad("tolerance", "%v must be a finite number > 1", a.Tolerance)
	}
	if !(a.Headroom >= 1) || math.IsInf(a.Headroom, 0) {
		bad("headroom", "%v must be a finite number >= 1", a.Headroom)
	}
	if !(a.Growth > 0 && a.Growth <= 1) {
		bad("growth", "%v is out of range (0, 1]", a.Growth)
	}
	if !(a.Backoff >= 0.5 && a.Backoff < 1) {
		bad("backoff", "%v is out of range [0.5, 1)", a.Backoff)
	}
	if !(a.CPUTarget >= 0 && a.CPUTarget <= 1) {
		bad("cpu_target", "%v is out of range [0, 1]", a.CPUTarget)
	}
	if !(a.MemoryTarget >= 0 && a.MemoryTarget <= 1) {
		bad("memory_target", "%v is out of range [0, 1]", a.MemoryTarget)
	}
	return Wrap(pkg, option, parent, errs)
}

// MissingMeter is Check's error, from pkg's Config, when a's CPUTarget or
// MemoryTarget has no meter: neither a's own (CPU, Memory) nor the one the
// Shedder holds (cpu, mem); cpuHow says how pkg's Shedder is given a CPU
// meter. nil when each target has one.
func MissingMeter(pkg string, a Adaptive, cpu, mem CPUMeter, cpuHow string) error {
	missing := func(key, kind string, target float64, how string) error {
		return Wrap(pkg, "Config", "", []*field.Error{field.Errorf("adaptive."+key, "%v needs a %s meter, and the Shedder has none (%s)", target, kind, how)})[0]
	}
	if a.CPUTarget > 0 && a.CPU == nil && cpu == nil {
		return missing("cpu_target", "CPU", a.CPUTarget, cpuHow)
	}
	if a.MemoryTarget > 0 && a.Memory == nil && mem == nil {
		return missing("memory_target", "memory", a.MemoryTarget, "give it in AdaptiveCapacity.Memory")
	}
	return nil
}

// Wrap returns each of errs as an error of pkg's option ("shedder: Config:
// adaptive.max: 5 must be >= min 10"), with parent, when not empty, put
// before its path. The field error stays reachable with errors.As, so the
// policy file's loader finds its path without reading the message.
func Wrap(pkg, option, parent string, errs []*field.Error) []error {
	out := make([]error, len(errs))
	for i, fe := range errs {
		if parent != "" {
			fe = fe.Under(parent)
		}
		out[i] = fmt.Errorf("%s: %s: %w", pkg, option, fe)
	}
	return out
}

// Stats is shedder.Stats, field for field (the two convert into each
// other); its documentation is there.
type Stats struct {
	// Capacity is the capacity in force (the fleet's, for fleetshed).
	Capacity int64
	// Adaptive reports whether the capacity is adaptive; the fields
	// below are zero when it is not.
	Adaptive bool
	// Estimate is this instance's adaptive capacity, unrounded.
	Estimate float64
	// Throughput is the highest rate of finished requests over the
	// history, per second.
	Throughput float64
	// MinLatency is the least mean latency of a window seen within Probe.
	MinLatency time.Duration
	// Latency is the mean latency of the last window.
	Latency time.Duration
	// CPU is the CPU share used over the last window; -1 without a meter.
	CPU float64
	// Memory is the memory share held at the end of the last window; -1
	// without a meter or a MemoryTarget.
	Memory float64
	// Overloaded reports whether the last window found the service
	// overloaded (latency above Tolerance x MinLatency, CPU at or above
	// CPUTarget, or memory at or above MemoryTarget).
	Overloaded bool
	// Probing reports whether the current window is a probe at half the
	// capacity.
	Probing bool
	// Windows is the number of windows closed so far.
	Windows int64
	// CPUErr is the error of the last CPU reading, if it failed (the
	// window was then decided without CPU).
	CPUErr error
	// MemoryErr is the error of the last memory reading, if it failed
	// (the window was then decided without memory).
	MemoryErr error
}

// Estimator learns a capacity from the requests a shedder admitted. Its
// mutex serialises window closes; set is called under it with every new
// whole capacity.
type Estimator struct {
	clock floodgate.Clock
	set   func(int64)
	Shed  atomic.Int64  // requests shed since the window opened
	least atomic.Int64  // minLat, read without the lock (Least)
	gen   atomic.Uint64 // windows closed: a ticket's gen is the window it was admitted in

	mu        sync.Mutex
	cfg       Adaptive
	meter     CPUMeter
	mem       CPUMeter
	win       capWindow
	thru      []float64 // throughput of the last History windows, a ring
	thruPos   int
	minLat    time.Duration
	minAt     time.Time
	probing   bool    // a probe runs: one window to drain, one to measure
	measuring bool    // the probe's drain window has closed
	probeGen  uint64  // the gen of the probe's measuring window
	saved     float64 // the estimate a probe interrupted
	probeCap  int64   // the capacity of a probe
	started   bool    // a window was overloaded: slow start is over
	est       float64
	stats     Stats
}

type capWindow struct {
	start       time.Time
	completions int           // success and failed
	samples     int           // completions and drops
	sum         time.Duration // of the samples' latencies
	peak        int64         // the most in flight a sample saw when admitted
}

// NewEstimator returns an estimator of settings cfg (valid, defaults
// applied) starting at initial, reading the CPU meter and the memory
// meter mem (nil: none) and clock, that calls set with every new whole
// capacity.
func NewEstimator(cfg Adaptive, meter, mem CPUMeter, initial int64, clock floodgate.Clock, set func(int64)) *Estimator {
	e := &Estimator{clock: clock, set: set, meter: meter, mem: mem, est: float64(initial)}
	e.cfg = cfg
	e.win.start = clock.Now()
	e.stats.CPU, e.stats.Memory = -1, -1
	return e
}

// reading is m's utilisation when a target is set for it, else -1; -1
// and the error when it cannot be read.
func reading(m CPUMeter, target float64) (float64, error) {
	if m == nil || target <= 0 {
		return -1, nil
	}
	u, err := m.Utilization()
	if err != nil {
		return -1, err
	}
	return u, nil
}

// Least returns the least mean latency of a window seen within Probe
// (0 until a window closed, and for a nil Estimator: a fixed capacity):
// what a request takes at the least.
func (e *Estimator) Least() time.Duration {
	if e == nil {
		return 0
	}
	return time.Duration(e.least.Load())
}

// Reconfigure installs cfg (valid, defaults applied) and the meters,
// keeping what was learnt and clamping the estimate to the new bounds.
func (e *Estimator) Reconfigure(cfg Adaptive, meter, mem CPUMeter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg, e.meter, e.mem = cfg, meter, mem
	if len(e.thru) > cfg.History {
		e.thru, e.thruPos = e.thru[:0], 0
	}
	e.publish(e.est)
}

// publish clamps est and hands its whole part on; mu held.
func (e *Estimator) publish(est float64) {
	e.est = math.Max(float64(e.cfg.Min), math.Min(float64(e.cfg.Max), est))
	c := int64(e.est)
	if e.probing {
		c = min(c, e.probeCap)
	}
	e.set(c)
}

// record takes one finished request, admitted in window gen with inflight
// requests in flight, into the window and, when the window is due, moves
// the capacity.
func (e *Estimator) record(o floodgate.Outcome, latency time.Duration, gen uint64, inflight int64) {
	if o == floodgate.OutcomeIgnored {
		return
	}
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.measuring && gen != e.probeGen {
		return // a probe measures only the requests admitted after its drain
	}
	w := &e.win
	if o != floodgate.OutcomeDropped {
		w.completions++
	}
	w.samples++
	w.sum += max(latency, 0)
	w.peak = max(w.peak, inflight)
	if now.Sub(w.start) < e.cfg.Window || w.samples < e.cfg.MinSamples {
		return
	}
	e.close(now)
}

// close ends the window at now and moves the estimate; mu held.
func (e *Estimator) close(now time.Time) {
	w := &e.win
	elapsed := now.Sub(w.start)
	mean := w.sum / time.Duration(w.samples)
	thru := float64(w.completions) / elapsed.Seconds()
	shed := e.Shed.Swap(0)
	peak := w.peak
	gen := e.gen.Add(1)
	*w = capWindow{start: now}
	st := &e.stats
	st.Windows++
	st.Latency = mean
	// Read every window: the CPU's reading covers the window, the
	// memory's is the level as it closes.
	st.CPU, st.CPUErr = reading(e.meter, e.cfg.CPUTarget)
	st.Memory, st.MemoryErr = reading(e.mem, e.cfg.MemoryTarget)
	if e.probing {
		// A probe runs at half the capacity: a first window lets the
		// requests admitted before it drain, a second measures the
		// latency of those admitted after, the service's least. Neither
		// throughput, held down, is recorded.
		if !e.measuring {
			e.measuring, e.probeGen = true, gen
			return
		}
		e.probing, e.measuring = false, false
		e.minLat, e.minAt = mean, now
		e.least.Store(int64(mean))
		st.Probing, st.MinLatency = false, mean
		e.publish(e.saved)
		return
	}
	if len(e.thru) < e.cfg.History {
		e.thru = append(e.thru, thru)
	} else {
		e.thru[e.thruPos] = thru
		e.thruPos = (e.thruPos + 1) % e.cfg.History
	}
	if e.minLat == 0 || mean < e.minLat {
		e.minLat, e.minAt = mean, now
		e.least.Store(int64(mean))
	}
	maxThru := 0.0
	for _, v := range e.thru {
		maxThru = math.Max(maxThru, v)
	}
	st.Throughput, st.MinLatency = maxThru, e.minLat
	if now.Sub(e.minAt) >= e.cfg.Probe {
		// Half of what was in flight, or of the capacity if less: a
		// capacity far above the load would not hold anything down.
		e.probing, e.saved = true, e.est
		e.probeCap = max(e.cfg.Min, int64(math.Min(e.est, float64(peak))*probeShare))
		st.Probing = true
		e.publish(e.est)
		return
	}
	littles := maxThru * e.minLat.Seconds() // requests in flight with no queue
	st.Overloaded = float64(mean) > e.cfg.Tolerance*float64(e.minLat) ||
		(e.cfg.CPUTarget > 0 && st.CPU >= e.cfg.CPUTarget) ||
		(e.cfg.MemoryTarget > 0 && st.Memory >= e.cfg.MemoryTarget)
	switch {
	case st.Overloaded:
		e.started = true
		e.publish(math.Min(e.est*e.cfg.Backoff, littles*e.cfg.Headroom))
	case shed > 0 && !e.started:
		e.publish(e.est * 2) // slow start: double until the first overload
	case shed > 0:
		e.publish(e.est * (1 + e.cfg.Growth))
	}
	st.Estimate = e.est
}

// Snapshot returns the Estimator's part of Stats.
func (e *Estimator) Snapshot() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats
	st.Adaptive, st.Estimate, st.Probing = true, e.est, e.probing
	return st
}

// Ticket carries one admitted request's start time to its Done when the
// capacity is adaptive; pooled, its Done is built once.
type Ticket struct {
	start    time.Time
	wait     *atomic.Int64 // the request's wait on degraded stores (reqctx.Wait), or nil
	wait0    int64         // *wait when the request was admitted
	gen      uint64
	inflight int64 // in flight when it was admitted, itself included
	e        *Estimator
	release  func(*Ticket)
	P        floodgate.Priority // the request's priority, for its owner
	Done     floodgate.Done     // built once: releases the slot, then records the request
}

// NewTicket returns a Ticket whose Done calls release (which frees the
// request's slot and may pool the Ticket) and then records the request
// in the estimator it was started for.
func NewTicket(release func(*Ticket)) *Ticket {
	t := &Ticket{release: release}
	t.Done = t.finish
	return t
}

// Start times a request admitted with inflight requests in flight, itself
// included, for e, from now (e's clock read when it is zero: a caller that
// read it already passes it on).
//
// wait, when not nil, is the request's counter of the time it spends
// waiting on a degraded store (reqctx.Wait): what a later stage adds to
// it is not the service's latency (a stalled Redis is not an overloaded
// service) and is taken out of the request's sample.
func (t *Ticket) Start(e *Estimator, p floodgate.Priority, inflight int64, wait *atomic.Int64, now time.Time) {
	if now.IsZero() {
		now = e.clock.Now()
	}
	t.e, t.P, t.gen, t.inflight, t.start = e, p, e.gen.Load(), inflight, now
	t.wait, t.wait0 = wait, 0
	if wait != nil {
		t.wait0 = wait.Load()
	}
}

func (t *Ticket) finish(res floodgate.Result) {
	e, gen, inflight := t.e, t.gen, t.inflight
	latency := e.clock.Now().Sub(t.start)
	if t.wait != nil {
		latency -= time.Duration(t.wait.Load() - t.wait0)
		t.wait = nil
	}
	t.e = nil
	t.release(t)
	e.record(res.Outcome, latency, gen, inflight)
}
