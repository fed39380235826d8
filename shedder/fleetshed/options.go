package fleetshed

import (
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/fair"
	"github.com/floodgate-go/floodgate/internal/field"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/internal/core"
)

// Config is what a Shedder is configured with beyond New's fleet and
// capacity: set it with Reconfigure, at start as at run time (a policy
// file's shedder: fleet: section holds it, and package guard applies it
// so). Everything else is package shedder's default: a hysteresis band of
// shedder.DefaultHysteresis of the fleet capacity and no hold, a
// RetryAfter of shedder.DefaultRetryAfter, requests without a priority at
// shedder.DefaultPriority, and the Policy "fleet-shedder".
type Config struct {
	// Capacity is the fleet capacity of a fixed Shedder (>= 1). With
	// Adaptive it is where this instance's share starts when the capacity
	// was fixed before.
	Capacity int64
	// Reserve is the share of fleet capacity kept for critical traffic,
	// in (0, 1): non-critical requests are shed when the fleet's
	// in-flight count reaches (1 − Reserve) × capacity. 0 means 0.20.
	Reserve float64
	// Adaptive, when not nil, makes each instance learn its own share of
	// the fleet capacity from its own requests, in [Adaptive.Min,
	// Adaptive.Max], as a shedder.Shedder learns its capacity (Capacity
	// is where this instance's share starts); the fleet capacity is the
	// sum over live instances (see the package documentation). A
	// CPUTarget needs a meter: Adaptive.CPU (*cpu.Meter of package
	// shedder/cpu), which later Configs without one keep using; so does a
	// MemoryTarget: Adaptive.Memory (*mem.Meter of package shedder/mem).
	Adaptive *shedder.AdaptiveCapacity
	// Fairness, when not nil, shares the non-critical room among the
	// callers it names (floodgate.Fairness), each instance on its own
	// counts: a caller's share of this instance's part of the room (the
	// room over the live instances), so that a caller whose requests the
	// load balancer spreads over the fleet is held to its share of the
	// fleet. While the fleet sheds, a caller under its share is still let
	// in, up to the hysteresis band above the threshold (a quarter of
	// the default reserve); one over it is shed with the Policy
	// "fleet-shedder.fairness".
	Fairness *floodgate.Fairness
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
	if c.Fairness != nil {
		for _, e := range fair.FieldErrors(c.Fairness) {
			errs = append(errs, e.Under("fairness"))
		}
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
	c := Config{Capacity: s.fixed, Reserve: s.reserve, Fairness: s.fair.Config()}
	if s.est.Load() != nil {
		a := s.adaptive
		c.Adaptive = &a
	}
	return c
}

// Check reports whether Reconfigure would accept c: c is valid, a
// CPUTarget has a meter (c.Adaptive.CPU, or one set before), and so has a
// MemoryTarget (c.Adaptive.Memory, or one set before).
func (s *Shedder) Check(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if e := s.fair.Check(c.Fairness); e != nil {
		return fmt.Errorf("fleetshed: Config: %w", e.Under("fairness"))
	}
	if c.Adaptive == nil {
		return nil
	}
	s.capMu.Lock()
	cpu, mem := s.meter, s.mem
	s.capMu.Unlock()
	return core.MissingMeter("fleetshed", core.Adaptive(*c.Adaptive), cpu, mem, "give it in AdaptiveCapacity.CPU")
}

// RequireScopes is told by the transport (package interceptor) which
// identities it fills: with strict (WithStrictIdentity, and package
// guard), a Config whose Fairness is by an identity not among them is an
// error, now and at every Reconfigure, for it would count every request
// as one caller's.
func (s *Shedder) RequireScopes(transport string, resolvable []string, strict bool) error {
	if err := s.fair.Require(resolvable, strict); err != nil {
		return fmt.Errorf("fleetshed: fairness.%w", err)
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
		c.Reserve = defaultReserve
	}
	s.capMu.Lock()
	s.fixed, s.reserve = c.Capacity, c.Reserve
	s.fair.Set(c.Fairness)
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
	if a.Memory != nil {
		s.mem = a.Memory
	}
	s.adaptive = a
	meter, mem := s.meter, s.mem
	e := s.est.Load()
	s.capMu.Unlock()
	if e == nil {
		s.startAdaptive(a, meter, mem, c.Capacity)
		return nil
	}
	e.Reconfigure(core.Adaptive(a), meter, mem)
	return nil
}
