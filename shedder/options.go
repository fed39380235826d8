package shedder

import (
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder/internal/core"
)

// Option configures New.
type Option func(*config)

// config is what Options set.
type config struct {
	core.Settings
	thresholds [floodgate.NumPriorities]float64
	adaptive   *AdaptiveCapacity
	meter      core.CPUMeter
	mem        core.CPUMeter
	retries    *Retries
}

// WithThresholds sets the fraction of capacity at which test, read and write
// traffic starts being shed (defaults DefaultTestThreshold,
// DefaultReadThreshold, DefaultWriteThreshold). Each must be in (0, 1] and
// test <= read <= write, so less important traffic is always shed first.
func WithThresholds(test, read, write float64) Option {
	return func(c *config) {
		for _, msg := range (Thresholds{test, read, write}).check() {
			c.Fail("WithThresholds", "%s", msg)
		}
		c.thresholds[floodgate.PriorityTest] = test
		c.thresholds[floodgate.PriorityRead] = read
		c.thresholds[floodgate.PriorityWrite] = write
	}
}

// WithHysteresis sets the band, a fraction of capacity in [0, 0.5), by which
// in flight must fall below a threshold before shedding stops (default
// DefaultHysteresis), and the hold, the least time (>= 0) shedding lasts
// after in flight was last at or above the threshold (default 0: no hold).
// WithHysteresis(0, 0) turns hysteresis off.
func WithHysteresis(band float64, hold time.Duration) Option {
	return func(c *config) { c.SetHysteresis("WithHysteresis", band, hold) }
}

// WithRetryAfter sets the RetryAfter of a shed Decision (default
// DefaultRetryAfter); it must be > 0.
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) { c.SetRetryAfter("WithRetryAfter", d) }
}

// WithDefaultPriority sets the priority used for requests whose Priority is
// PriorityUnspecified (default DefaultPriority). It must be a named priority
// other than unspecified.
func WithDefaultPriority(p floodgate.Priority) Option {
	return func(c *config) { c.SetDefaultPriority("WithDefaultPriority", p) }
}

// WithClock sets the Clock the Shedder reads its hold from
// (floodgate.SystemClock() by default).
func WithClock(clock floodgate.Clock) Option {
	return func(c *config) { c.SetClock("WithClock", clock) }
}

// WithPolicy sets the Policy name of shed Decisions (default DefaultPolicy).
func WithPolicy(name string) Option {
	return func(c *config) { c.SetPolicy("WithPolicy", name) }
}

// WithAdaptiveCapacity makes the Shedder's capacity follow the service:
// the capacity given to New is where it starts (clamped to [a.Min,
// a.Max]), and it then moves as the package documentation ("Adaptive
// capacity") says. A bad field of a is reported by name.
func WithAdaptiveCapacity(a AdaptiveCapacity) Option {
	return func(c *config) {
		a = a.withDefaults()
		c.Errs = append(c.Errs, a.check("WithAdaptiveCapacity", "")...)
		c.adaptive = &a
		if a.CPU != nil {
			c.meter = a.CPU
		}
		if a.Memory != nil {
			c.mem = a.Memory
		}
	}
}

// WithCPU gives the Shedder the CPU meter an adaptive capacity's CPUTarget
// is checked against (*cpu.Meter of package shedder/cpu, for the
// container's cgroup quota). It is read once per window, only while the
// capacity is adaptive with a CPUTarget.
func WithCPU(m interface{ Utilization() (float64, error) }) Option {
	return func(c *config) {
		if m == nil {
			c.Fail("WithCPU", "meter is nil")
		}
		c.meter = m
	}
}
