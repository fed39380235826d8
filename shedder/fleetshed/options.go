package fleetshed

import (
	"errors"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/field"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/internal/core"
)

// Option configures New; New reports every bad one.
type Option func(*config)

// config is what Options set.
type config struct {
	core.Settings
	adaptive *shedder.AdaptiveCapacity
	meter    shedder.CPUMeter
	reserve  float64
}

// WithReserve sets the share of fleet capacity, in (0, 1), kept for
// critical traffic: non-critical requests are shed when the fleet's
// in-flight count reaches (1 − reserve) × capacity. Default DefaultReserve.
func WithReserve(share float64) Option {
	return func(c *config) {
		if !(share > 0 && share < 1) {
			c.Fail("WithReserve", "reserve %v is out of range (0, 1)", share)
		}
		c.reserve = share
	}
}

// WithHysteresis sets the band, a fraction of fleet capacity in [0, 0.5),
// by which the fleet's in-flight count must fall below the threshold
// before shedding stops (default shedder.DefaultHysteresis), and the hold,
// the least time (>= 0) shedding lasts after it was last at or above the
// threshold (default 0: no hold), as shedder.WithHysteresis does for one
// instance.
func WithHysteresis(band float64, hold time.Duration) Option {
	return func(c *config) { c.SetHysteresis("WithHysteresis", band, hold) }
}

// WithRetryAfter sets the RetryAfter of a shed Decision (default
// shedder.DefaultRetryAfter); it must be > 0.
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) { c.SetRetryAfter("WithRetryAfter", d) }
}

// WithDefaultPriority sets the priority used for requests whose Priority
// is PriorityUnspecified (default shedder.DefaultPriority). It must be a
// named priority other than unspecified.
func WithDefaultPriority(p floodgate.Priority) Option {
	return func(c *config) { c.SetDefaultPriority("WithDefaultPriority", p) }
}

// WithPolicy sets the Policy name of shed Decisions (default
// DefaultPolicy).
func WithPolicy(name string) Option {
	return func(c *config) { c.SetPolicy("WithPolicy", name) }
}

// WithAdaptiveCapacity makes each instance learn its own share of the
// fleet capacity from its own requests, in [a.Min, a.Max], as a
// shedder.Shedder learns its capacity (the capacity given to New is where
// this instance's share starts); the fleet capacity is the sum over live
// instances (see the package documentation). A bad field of a is reported
// by name.
func WithAdaptiveCapacity(a shedder.AdaptiveCapacity) Option {
	return func(c *config) {
		a = shedder.AdaptiveCapacity(core.Adaptive(a).WithDefaults())
		c.Errs = append(c.Errs, core.Adaptive(a).Check("fleetshed", "WithAdaptiveCapacity", "")...)
		c.adaptive = &a
		if a.CPU != nil {
			c.meter = a.CPU
		}
	}
}

// WithCPU gives the Shedder the CPU meter an adaptive capacity's
// CPUTarget is checked against (*cpu.Meter of package shedder/cpu). It is
// read once per window, only while the capacity is adaptive with a
// CPUTarget.
func WithCPU(m shedder.CPUMeter) Option {
	return func(c *config) {
		if m == nil {
			c.Fail("WithCPU", "meter is nil")
		}
		c.meter = m
	}
}

// Config is the part of a Shedder's settings that can change at run time
// (Reconfigure), and what a policy file's shedder: fleet: section holds.
type Config struct {
	// Capacity is the fleet capacity of a fixed Shedder (>= 1). With
	// Adaptive it is where this instance's share starts when the capacity
	// was fixed before.
	Capacity int64
	// Reserve is the share of fleet capacity kept for critical traffic,
	// in (0, 1); 0 means DefaultReserve.
	Reserve float64
	// Adaptive, when not nil, makes each instance learn its share (see
	// WithAdaptiveCapacity).
	Adaptive *shedder.AdaptiveCapacity
}

// Validate reports every bad field of c, or nil.
func (c Config) Validate() error {
	var errs []*field.Error
	if c.Capacity < 1 {
		errs = append(errs, field.Errorf("capacity", "%d must be >= 1", c.Capacity))
	}
	if c.Capacity > shedder.MaxCapacity {
		errs = append(errs, field.Errorf("capacity", "%d must be <= %d (MaxCapacity)", c.Capacity, int64(shedder.MaxCapacity)))
	}
	if c.Reserve != 0 && !(c.Reserve > 0 && c.Reserve < 1) {
		errs = append(errs, field.Errorf("reserve", "%v is out of range (0, 1)", c.Reserve))
	}
	out := core.Wrap("fleetshed", "Config", "", errs)
	if c.Adaptive != nil {
		out = append(out, core.Adaptive(*c.Adaptive).WithDefaults().Check("fleetshed", "Config", "adaptive")...)
	}
	return errors.Join(out...)
}

// Config returns the Shedder's current settings.
func (s *Shedder) Config() Config {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	c := Config{Capacity: s.fixed, Reserve: s.reserve}
	if s.est.Load() != nil {
		a := s.adaptive
		c.Adaptive = &a
	}
	return c
}

// Check reports whether Reconfigure would accept c: c is valid, and a
// CPUTarget has a meter (c.Adaptive.CPU, WithCPU, or one set before).
func (s *Shedder) Check(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Adaptive != nil && c.Adaptive.CPUTarget > 0 && c.Adaptive.CPU == nil {
		s.capMu.Lock()
		m := s.meter
		s.capMu.Unlock()
		if m == nil {
			return core.NoMeterError("fleetshed", c.Adaptive.CPUTarget)
		}
	}
	return nil
}

// Reconfigure replaces the Shedder's capacity, reserve and adaptive
// settings at run time (a policy reload). A c that Check rejects changes
// nothing and is returned as the error.
func (s *Shedder) Reconfigure(c Config) error {
	if err := s.Check(c); err != nil {
		return err
	}
	if c.Reserve == 0 {
		c.Reserve = DefaultReserve
	}
	s.capMu.Lock()
	s.fixed, s.reserve = c.Capacity, c.Reserve
	if c.Adaptive == nil {
		s.est.Store(nil)
		s.adaptive = shedder.AdaptiveCapacity{}
		s.capMu.Unlock()
		s.relayout()
		return nil
	}
	a := shedder.AdaptiveCapacity(core.Adaptive(*c.Adaptive).WithDefaults())
	if a.CPU != nil {
		s.meter = a.CPU
	}
	s.adaptive = a
	meter := s.meter
	e := s.est.Load()
	s.capMu.Unlock()
	if e == nil {
		s.startAdaptive(a, meter, c.Capacity)
		return nil
	}
	e.Reconfigure(core.Adaptive(a), meter)
	return nil
}
