package shedder

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/fair"
	"github.com/floodgate-go/floodgate/internal/field"
	"github.com/floodgate-go/floodgate/shedder/internal/core"
)

// AdaptiveCapacity makes the capacity follow the service instead of a
// hand-tuned number (WithAdaptiveCapacity, fleetshed.Config.Adaptive, or a
// policy file's shedder: adaptive: section). The package documentation
// ("Adaptive capacity") gives the rule. The zero value of every field is
// its default; a bad field is reported by name.
type AdaptiveCapacity struct {
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
	// CPU is the meter CPUTarget is checked against: its Utilization
	// reports the CPU the service used since the previous call, as a
	// share of the CPU it may use (1 = the whole quota; *cpu.Meter of
	// package shedder/cpu, the cgroup-aware one; tests pass a fake). nil
	// keeps the one given to WithCPU, or the one set before
	// (Reconfigure).
	CPU interface{ Utilization() (float64, error) }
	// MemoryTarget, when above 0, counts the service as overloaded when
	// the memory it holds as a window closes is at least this share of
	// its limit (0.8: 80% of GOMEMLIMIT or of the cgroup's memory
	// limit); it needs a memory meter (Memory below). 0, the default,
	// leaves memory out. It must lie in [0, 1].
	MemoryTarget float64
	// Memory is the meter MemoryTarget is checked against: its
	// Utilization reports the memory in use as a share of the limit
	// (*mem.Meter of package shedder/mem; tests pass a fake). nil keeps
	// the one set before, by New's WithAdaptiveCapacity or a
	// Reconfigure, even across a Reconfigure to a fixed capacity.
	Memory interface{ Utilization() (float64, error) }
}

// withDefaults returns a with every zero field set to its default.
func (a AdaptiveCapacity) withDefaults() AdaptiveCapacity {
	return AdaptiveCapacity(core.Adaptive(a).WithDefaults())
}

// check reports the bad fields of a (defaults applied) under option, in
// the form "shedder: <option>: AdaptiveCapacity.<Field> <problem>".
func (a AdaptiveCapacity) check(option, parent string) []error {
	return core.Adaptive(a).Check("shedder", option, parent)
}

// Stats is a snapshot of a shedder's capacity and what it was learnt from,
// for logs, dashboards and the demo.
type Stats struct {
	// Capacity is the capacity in force (the fleet's, for a fleet-usage
	// shedder).
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

// Thresholds are the shares of capacity from which test, read and write
// traffic is shed (see WithThresholds). The zero value means the defaults.
type Thresholds struct {
	// Test, Read and Write are the shares of capacity, in (0, 1], from
	// which test, read and write traffic is shed; test <= read <= write.
	Test, Read, Write float64
}

func (t Thresholds) orDefault() Thresholds {
	if t == (Thresholds{}) {
		return Thresholds{DefaultTestThreshold, DefaultReadThreshold, DefaultWriteThreshold}
	}
	return t
}

// check reports what is wrong with t, each problem a sentence naming the
// threshold.
func (t Thresholds) check() []string {
	var bad []string
	ok := true
	for _, v := range []struct {
		p floodgate.Priority
		v float64
	}{{floodgate.PriorityTest, t.Test}, {floodgate.PriorityRead, t.Read}, {floodgate.PriorityWrite, t.Write}} {
		if math.IsNaN(v.v) || v.v <= 0 || v.v > 1 {
			bad = append(bad, fmt.Sprintf("%s threshold %v is out of range (0, 1]", v.p, v.v))
			ok = false
		}
	}
	if ok && (t.Test > t.Read || t.Read > t.Write) {
		bad = append(bad, fmt.Sprintf("thresholds test %v, read %v, write %v must satisfy test <= read <= write", t.Test, t.Read, t.Write))
	}
	return bad
}

// Config is the part of a Shedder's settings that can change at run time
// (Reconfigure), and what a policy file's shedder: section holds (package
// tiers).
type Config struct {
	// Capacity is the capacity of a fixed Shedder (>= 1). With Adaptive
	// it is where the capacity starts when it was fixed before; an
	// adaptive capacity already learnt is kept, clamped to the new
	// [Min, Max].
	Capacity int64
	// Thresholds; the zero value means the defaults.
	Thresholds Thresholds
	// Adaptive, when not nil, makes the capacity adaptive.
	Adaptive *AdaptiveCapacity
	// Retries, when not nil, sheds retries before first attempts of the
	// same priority (WithRetries).
	Retries *Retries
	// Fairness, when not nil, shares each priority's room among the
	// callers it names (floodgate.Fairness): while a priority is shed, a
	// caller under its share is still let in, up to the next priority's
	// threshold (the capacity, for writes), and one over it is shed with
	// the Policy's FairnessPolicySuffix.
	Fairness *floodgate.Fairness
}

// Validate reports every bad field of c, or nil.
func (c Config) Validate() error {
	var errs []*field.Error
	if c.Capacity < 1 {
		errs = append(errs, field.Errorf("capacity", "%d must be >= 1", c.Capacity))
	}
	if c.Capacity > MaxCapacity {
		errs = append(errs, field.Errorf("capacity", "%d must be <= %d (MaxCapacity)", c.Capacity, int64(MaxCapacity)))
	}
	bad := c.Thresholds.orDefault().check()
	for _, msg := range bad {
		errs = append(errs, &field.Error{Path: "thresholds", Err: errors.New(msg)})
	}
	if len(bad) == 0 {
		errs = append(errs, retriesErrors(c)...)
	}
	if c.Fairness != nil {
		for _, e := range fair.FieldErrors(c.Fairness) {
			errs = append(errs, e.Under("fairness"))
		}
	}
	out := core.Wrap("shedder", "Config", "", errs)
	if c.Adaptive != nil {
		out = append(out, c.Adaptive.withDefaults().check("Config", "adaptive")...)
	}
	return errors.Join(out...)
}

// Config returns the Shedder's current settings. With an adaptive
// capacity, Capacity is the one it started from.
func (s *Shedder) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Config{
		Capacity:   s.fixed,
		Thresholds: Thresholds{s.thresholds[floodgate.PriorityTest], s.thresholds[floodgate.PriorityRead], s.thresholds[floodgate.PriorityWrite]},
	}
	if s.est.Load() != nil {
		a := s.adaptive
		c.Adaptive = &a
	}
	if rs := s.retries.Load(); rs != nil {
		c.Retries = &Retries{Margin: rs.margin, AttemptHeader: rs.attempt}
	}
	c.Fairness = s.fair.Config()
	return c
}

// Check reports whether Reconfigure would accept c: c is valid, a
// CPUTarget has a meter (c.Adaptive.CPU, WithCPU, or one set before), and
// so has a MemoryTarget (c.Adaptive.Memory, or one set before).
func (s *Shedder) Check(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if e := s.fair.Check(c.Fairness); e != nil {
		return fmt.Errorf("shedder: Config: %w", e.Under("fairness"))
	}
	if c.Adaptive == nil {
		return nil
	}
	s.mu.Lock()
	cpu, mem := s.meter, s.mem
	s.mu.Unlock()
	return core.MissingMeter("shedder", core.Adaptive(*c.Adaptive), cpu, mem, "build it WithCPU")
}

// Reconfigure replaces the Shedder's capacity, thresholds and adaptive
// settings at run time (a policy reload). Requests in flight stay
// admitted and are released as usual. A c that Check rejects changes
// nothing and is returned as the error.
func (s *Shedder) Reconfigure(c Config) error {
	if err := s.Check(c); err != nil {
		return err
	}
	t := c.Thresholds.orDefault()
	s.mu.Lock()
	s.thresholds[floodgate.PriorityTest], s.thresholds[floodgate.PriorityRead], s.thresholds[floodgate.PriorityWrite] = t.Test, t.Read, t.Write
	s.setRetries(c.Retries)
	s.fair.Set(c.Fairness) // an unchanged one keeps its counts
	s.fixed = c.Capacity
	if c.Adaptive == nil {
		s.est.Store(nil)
		s.adaptive = AdaptiveCapacity{}
		s.layout(c.Capacity)
		s.mu.Unlock()
		return nil
	}
	a := c.Adaptive.withDefaults()
	if a.CPU != nil {
		s.meter = a.CPU
	}
	if a.Memory != nil {
		s.mem = a.Memory
	}
	s.adaptive = a
	meter, mem := s.meter, s.mem
	e := s.est.Load()
	s.mu.Unlock()
	if e == nil {
		s.startAdaptive(a, meter, mem, c.Capacity)
		return nil
	}
	e.Reconfigure(core.Adaptive(a), meter, mem) // publishes the clamped capacity: the new thresholds apply
	return nil
}
