package shedder

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Option configures New.
type Option func(*config)

// FleetOption configures NewFleet.
type FleetOption func(*fleetConfig)

// common holds the settings New and NewFleet share, and the errors their
// options report.
type common struct {
	hysteresis      float64
	hold            time.Duration
	retryAfter      time.Duration
	defaultPriority floodgate.Priority
	clock           floodgate.Clock // nil until an option sets one
	policy          string
	errs            []error
}

// config is what Options set.
type config struct {
	common
	thresholds [floodgate.NumPriorities]float64
	adaptive   *AdaptiveCapacity
	meter      CPUMeter
}

// fleetConfig is what FleetOptions set.
type fleetConfig struct {
	common
	adaptive *AdaptiveCapacity
	meter    CPUMeter
	reserve  float64
	instance string
	key      string
	ttl      time.Duration
	interval time.Duration
	timeout  time.Duration
}

func newCommon(policy string) common {
	return common{
		hysteresis:      DefaultHysteresis,
		retryAfter:      DefaultRetryAfter,
		defaultPriority: DefaultPriority,
		policy:          policy,
	}
}

// fail records the error of the option named option.
func (c *common) fail(option, format string, args ...any) {
	c.errs = append(c.errs, errors.New("shedder: "+option+": "+fmt.Sprintf(format, args...)))
}

// timeSource returns the Clock set by an option, or the system clock.
func (c *common) timeSource() floodgate.Clock {
	if c.clock == nil {
		return floodgate.SystemClock()
	}
	return c.clock
}

// apply runs opts on c, reporting a nil one in e as a nil typeName.
func apply[C any, O ~func(*C)](c *C, e *common, typeName string, opts []O) {
	for _, opt := range opts {
		if opt == nil {
			e.errs = append(e.errs, errors.New("shedder: nil "+typeName))
			continue
		}
		opt(c)
	}
}

// setting is a setting both constructors take. It reports its errors under
// the name of the With… function that carries it.
type setting func(c *common, option string)

func (s setting) option(name string) Option {
	return func(c *config) { s(&c.common, name) }
}

func (s setting) fleetOption(name string) FleetOption {
	return func(c *fleetConfig) { s(&c.common, name) }
}

// WithThresholds sets the fraction of capacity at which test, read and write
// traffic starts being shed (defaults DefaultTestThreshold,
// DefaultReadThreshold, DefaultWriteThreshold). Each must be in (0, 1] and
// test <= read <= write, so less important traffic is always shed first.
func WithThresholds(test, read, write float64) Option {
	return func(c *config) {
		for _, msg := range (Thresholds{test, read, write}).check() {
			c.fail("WithThresholds", "%s", msg)
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
	return hysteresis(band, hold).option("WithHysteresis")
}

// WithFleetHysteresis is WithHysteresis for NewFleet, where the band is a
// fraction of fleet capacity.
func WithFleetHysteresis(band float64, hold time.Duration) FleetOption {
	return hysteresis(band, hold).fleetOption("WithFleetHysteresis")
}

func hysteresis(band float64, hold time.Duration) setting {
	return func(c *common, option string) {
		if math.IsNaN(band) || band < 0 || band >= 0.5 {
			c.fail(option, "hysteresis band %v is out of range [0, 0.5)", band)
		}
		if hold < 0 {
			c.fail(option, "hysteresis hold %s is negative", hold)
		}
		c.hysteresis, c.hold = band, hold
	}
}

// WithRetryAfter sets the RetryAfter of a shed Decision (default
// DefaultRetryAfter); it must be > 0.
func WithRetryAfter(d time.Duration) Option {
	return retryAfter(d).option("WithRetryAfter")
}

// WithFleetRetryAfter is WithRetryAfter for NewFleet.
func WithFleetRetryAfter(d time.Duration) FleetOption {
	return retryAfter(d).fleetOption("WithFleetRetryAfter")
}

func retryAfter(d time.Duration) setting {
	return func(c *common, option string) {
		if d <= 0 {
			c.fail(option, "retry-after %s must be positive", d)
		}
		c.retryAfter = d
	}
}

// WithDefaultPriority sets the priority used for requests whose Priority is
// PriorityUnspecified (default DefaultPriority). It must be a named priority
// other than unspecified.
func WithDefaultPriority(p floodgate.Priority) Option {
	return defaultPriority(p).option("WithDefaultPriority")
}

// WithFleetDefaultPriority is WithDefaultPriority for NewFleet.
func WithFleetDefaultPriority(p floodgate.Priority) FleetOption {
	return defaultPriority(p).fleetOption("WithFleetDefaultPriority")
}

func defaultPriority(p floodgate.Priority) setting {
	return func(c *common, option string) {
		if p == floodgate.PriorityUnspecified || !p.Valid() {
			c.fail(option, "default priority %v is not one of critical, write, read, test", p)
		}
		c.defaultPriority = p
	}
}

// WithClock sets the Clock the Shedder reads its hold from
// (floodgate.SystemClock() by default).
func WithClock(clock floodgate.Clock) Option {
	return clockSetting(clock).option("WithClock")
}

// WithFleetClock sets the Clock a Fleet reads time from
// (floodgate.SystemClock() by default). It also makes the Redis script take
// its time from this Clock instead of Redis TIME, so tests can run on fake
// time.
func WithFleetClock(clock floodgate.Clock) FleetOption {
	return clockSetting(clock).fleetOption("WithFleetClock")
}

func clockSetting(clock floodgate.Clock) setting {
	return func(c *common, option string) {
		if clock == nil {
			c.fail(option, "clock is nil")
			return
		}
		c.clock = clock
	}
}

// WithPolicy sets the Policy name of shed Decisions (default DefaultPolicy).
func WithPolicy(name string) Option {
	return policy(name).option("WithPolicy")
}

// WithFleetPolicy is WithPolicy for NewFleet (default DefaultFleetPolicy).
func WithFleetPolicy(name string) FleetOption {
	return policy(name).fleetOption("WithFleetPolicy")
}

func policy(name string) setting {
	return func(c *common, option string) {
		if name == "" {
			c.fail(option, "policy name is empty")
		}
		c.policy = name
	}
}

// WithFleetReserve sets the share of fleet capacity, in (0, 1), kept for
// critical traffic: non-critical requests are shed when the fleet's
// in-flight count reaches (1 − reserve) × capacity. Default DefaultReserve.
func WithFleetReserve(share float64) FleetOption {
	return func(c *fleetConfig) {
		if !(share > 0 && share < 1) {
			c.fail("WithFleetReserve", "reserve %v is out of range (0, 1)", share)
		}
		c.reserve = share
	}
}

// WithFleetInstanceID names this instance in Redis (default: 16 random hex
// digits). Two live instances must never share an ID.
func WithFleetInstanceID(id string) FleetOption {
	return func(c *fleetConfig) {
		if id == "" || len(id) > instanceIDMaxLength {
			c.fail("WithFleetInstanceID", "instance ID %q must have 1 to %d bytes", id, instanceIDMaxLength)
		}
		c.instance = id
	}
}

// WithFleetKey sets the Redis key (a hash) holding the fleet's counts,
// DefaultFleetKey by default. Services sharing one Redis need distinct keys.
func WithFleetKey(key string) FleetOption {
	return func(c *fleetConfig) {
		if key == "" {
			c.fail("WithFleetKey", "fleet key is empty")
		}
		if !clusterSafeKey(key) {
			c.fail("WithFleetKey", "fleet key %q has a '}' but no hash tag ({tag}, not empty): on Redis Cluster its keys would hash to different slots", key)
		}
		c.key = key
	}
}

// WithFleetSync sets how often Run publishes this instance's counts and
// reads the fleet's (interval), how long an instance's entry lives without a
// refresh (ttl; a dead instance's share is freed after it), and the timeout
// of each Redis call. They must satisfy 0 < interval < ttl, ttl a whole
// number of milliseconds, and timeout > 0. Defaults: DefaultInterval,
// DefaultTTL, DefaultSyncTimeout.
func WithFleetSync(interval, ttl, timeout time.Duration) FleetOption {
	return func(c *fleetConfig) {
		if interval <= 0 || ttl <= interval {
			c.fail("WithFleetSync", "sync interval %s and ttl %s must satisfy 0 < interval < ttl", interval, ttl)
		}
		if ttl%time.Millisecond != 0 {
			c.fail("WithFleetSync", "sync ttl %s is not a whole number of milliseconds", ttl)
		}
		if timeout <= 0 {
			c.fail("WithFleetSync", "sync timeout %s must be positive", timeout)
		}
		c.interval, c.ttl, c.timeout = interval, ttl, timeout
	}
}

// WithAdaptiveCapacity makes the Shedder's capacity follow the service:
// the capacity given to New is where it starts (clamped to [a.Min,
// a.Max]), and it then moves as the package documentation ("Adaptive
// capacity") says. A bad field of a is reported by name.
func WithAdaptiveCapacity(a AdaptiveCapacity) Option {
	return func(c *config) {
		a = a.withDefaults()
		c.errs = append(c.errs, wrap("WithAdaptiveCapacity", "", a.check())...)
		c.adaptive = &a
		if a.CPU != nil {
			c.meter = a.CPU
		}
	}
}

// WithFleetAdaptiveCapacity is WithAdaptiveCapacity for NewFleet: each
// instance learns its own capacity from its own requests, in [a.Min,
// a.Max], and the fleet's capacity is the sum over live instances (see
// Fleet).
func WithFleetAdaptiveCapacity(a AdaptiveCapacity) FleetOption {
	return func(c *fleetConfig) {
		a = a.withDefaults()
		c.errs = append(c.errs, wrap("WithFleetAdaptiveCapacity", "", a.check())...)
		c.adaptive = &a
		if a.CPU != nil {
			c.meter = a.CPU
		}
	}
}

// WithCPU gives the Shedder the CPU meter an adaptive capacity's CPUTarget
// is checked against (*cpu.Meter of package shedder/cpu, for the
// container's cgroup quota). It is read once per window, only while the
// capacity is adaptive with a CPUTarget.
func WithCPU(m CPUMeter) Option {
	return func(c *config) {
		if m == nil {
			c.fail("WithCPU", "meter is nil")
		}
		c.meter = m
	}
}

// WithFleetCPU is WithCPU for NewFleet.
func WithFleetCPU(m CPUMeter) FleetOption {
	return func(c *fleetConfig) {
		if m == nil {
			c.fail("WithFleetCPU", "meter is nil")
		}
		c.meter = m
	}
}

// clusterSafeKey reports whether key and the keys derived from it (see
// capacityKey) hash to one Redis Cluster slot: it has a hash tag, or no
// '}' at all.
func clusterSafeKey(key string) bool {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return true
		}
	}
	return !strings.Contains(key, "}")
}
