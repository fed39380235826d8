package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Adaptive is an optional in-flight limiter whose cap is learnt from
// latency, in the style of Netflix's gradient limiter: it is a separate
// Admitter, used only when built with NewAdaptive, and is not part of
// Limiter.
//
// What it decides: a request is admitted while fewer than Limit() requests
// are in flight. Each Done reports the request's latency (from Admit to
// Done, read from the Clock). Once per Window, when at least MinSamples
// latencies were reported, the limit moves:
//
//	short    = mean latency of the window
//	long     = long + (short - long) / LongWindow   (first window: long = short)
//	gradient = clamp(Tolerance * long / short, 0.5, 1)
//	target   = limit * gradient + sqrt(limit)       (sqrt(limit): headroom to probe upward)
//	limit    = clamp(limit*(1-Smoothing) + target*Smoothing, Min, Max)
//
// so the limit grows slowly while latency stays near its long-run level and
// shrinks (at most halving the target) when latency rises above Tolerance
// times it. When fewer than half the limit was ever in flight during the
// window the service is not limited by concurrency and the limit stays put.
// When short latency falls below half the long one (the overload passed),
// long is reset to short so the limiter recovers quickly.
//
// Unlike Limiter, Adaptive allocates one small Done per admitted request
// (it carries the start time) and takes a mutex in Done.
type Adaptive struct {
	inflight atomic.Int64
	limit    atomic.Int64 // floor of est, what Admit compares against

	cfg   AdaptiveConfig
	clock floodgate.Clock

	mu          sync.Mutex
	est         float64 // the limit, unrounded
	long        float64 // long-run latency, seconds; 0 before the first window
	windowStart time.Time
	sum         float64 // latencies of this window, seconds
	count       int
	maxInflight int64
}

var _ floodgate.Admitter = (*Adaptive)(nil)

// AdaptiveConfig configures NewAdaptive. The zero value of every field is
// its default, so AdaptiveConfig{} is a valid configuration; NewAdaptive
// reports a bad field by its name.
type AdaptiveConfig struct {
	// Name is the policy name in Decisions; "" means
	// "adaptive-concurrency".
	Name string
	// Initial is the limit to start from; 0 means 20. It must lie in
	// [Min, Max].
	Initial int64
	// Min is the least the limit falls to; 0 means 1. It must be >= 1.
	Min int64
	// Max is the most the limit grows to; 0 means 1000. It must be >=
	// Initial.
	Max int64
	// Window is the least time between limit updates; 0 means 1s. It must
	// not be negative.
	Window time.Duration
	// MinSamples is the least number of latencies per update; 0 means 10.
	// It must not be negative.
	MinSamples int
	// Smoothing weighs each new target; 0 means 0.2. It must lie in
	// (0, 1].
	Smoothing float64
	// Tolerance is how much above its long-run level latency may rise
	// before the limit shrinks; 0 means 1.5. It must be a finite number
	// >= 1.
	Tolerance float64
	// LongWindow is the number of windows the long-run latency averages
	// over; 0 means 60. It must not be negative.
	LongWindow int
	// RetryAfter is the RetryAfter of a deny; 0 means DefaultRetryAfter. It
	// must not be negative.
	RetryAfter time.Duration
	// Clock is what latencies and windows are read from; nil means
	// floodgate.SystemClock().
	Clock floodgate.Clock
}

// withDefaults returns cfg with every zero field set to its default.
func (cfg AdaptiveConfig) withDefaults() AdaptiveConfig {
	orDefault(&cfg.Name, "adaptive-concurrency")
	orDefault(&cfg.Initial, 20)
	orDefault(&cfg.Min, 1)
	orDefault(&cfg.Max, 1000)
	orDefault(&cfg.Window, time.Second)
	orDefault(&cfg.MinSamples, 10)
	orDefault(&cfg.Smoothing, 0.2)
	orDefault(&cfg.Tolerance, 1.5)
	orDefault(&cfg.LongWindow, 60)
	orDefault(&cfg.RetryAfter, DefaultRetryAfter)
	if cfg.Clock == nil {
		cfg.Clock = floodgate.SystemClock()
	}
	return cfg
}

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// NewAdaptive returns an adaptive limiter, or an error naming every bad
// field of cfg ("concurrency: NewAdaptive: AdaptiveConfig.Smoothing 2 is
// out of range (0, 1]").
func NewAdaptive(cfg AdaptiveConfig) (*Adaptive, error) {
	cfg = cfg.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, errors.New("concurrency: NewAdaptive: AdaptiveConfig."+field+" "+fmt.Sprintf(format, args...)))
	}
	if cfg.Min < 1 {
		bad("Min", "%d must be >= 1", cfg.Min)
	}
	if cfg.Initial < cfg.Min {
		bad("Initial", "%d must be >= Min %d", cfg.Initial, cfg.Min)
	}
	if cfg.Max < cfg.Initial {
		bad("Max", "%d must be >= Initial %d", cfg.Max, cfg.Initial)
	}
	if cfg.Window < 0 {
		bad("Window", "%s is negative", cfg.Window)
	}
	if cfg.MinSamples < 0 {
		bad("MinSamples", "%d is negative", cfg.MinSamples)
	}
	if !(cfg.Smoothing > 0 && cfg.Smoothing <= 1) {
		bad("Smoothing", "%v is out of range (0, 1]", cfg.Smoothing)
	}
	if !(cfg.Tolerance >= 1) || math.IsInf(cfg.Tolerance, 0) {
		bad("Tolerance", "%v must be a finite number >= 1", cfg.Tolerance)
	}
	if cfg.LongWindow < 0 {
		bad("LongWindow", "%d is negative", cfg.LongWindow)
	}
	if cfg.RetryAfter < 0 {
		bad("RetryAfter", "%s is negative", cfg.RetryAfter)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	a := &Adaptive{cfg: cfg, clock: cfg.Clock, est: float64(cfg.Initial)}
	a.limit.Store(cfg.Initial)
	a.windowStart = cfg.Clock.Now()
	return a, nil
}

// Limit returns the current cap on requests in flight.
func (a *Adaptive) Limit() int64 { return a.limit.Load() }

// InFlight returns the requests in flight.
func (a *Adaptive) InFlight() int64 { return a.inflight.Load() }

// Admit implements floodgate.Admitter.
func (a *Adaptive) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	for {
		n := a.inflight.Load()
		limit := a.limit.Load()
		if n >= limit {
			return floodgate.Decision{
				Allowed: false, Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
				Policy: a.cfg.Name, Limit: limit, RetryAfter: a.cfg.RetryAfter, Priority: r.Priority,
			}, nil, nil
		}
		if a.inflight.CompareAndSwap(n, n+1) {
			start := a.clock.Now()
			var once atomic.Bool
			done := func(res floodgate.Result) {
				if once.CompareAndSwap(false, true) {
					if res.Outcome != floodgate.OutcomeIgnored {
						a.sample(a.clock.Now().Sub(start), n+1)
					}
					a.inflight.Add(-1)
				}
			}
			return floodgate.Decision{
				Allowed: true, Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
				Policy: a.cfg.Name, Limit: limit, Remaining: limit - n - 1, Priority: r.Priority,
			}, done, nil
		}
	}
}

// sample records one latency; inflight is the in-flight count its request
// saw when admitted (itself included).
func (a *Adaptive) sample(rtt time.Duration, inflight int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sum += rtt.Seconds()
	a.count++
	a.maxInflight = max(a.maxInflight, inflight)
	now := a.clock.Now()
	if a.count < a.cfg.MinSamples || now.Sub(a.windowStart) < a.cfg.Window {
		return
	}
	short := a.sum / float64(a.count)
	appLimited := float64(a.maxInflight) < a.est/2
	a.sum, a.count, a.maxInflight, a.windowStart = 0, 0, 0, now
	if short <= 0 {
		return
	}
	if a.long == 0 || short < a.long/2 {
		a.long = short
	} else {
		a.long += (short - a.long) / float64(a.cfg.LongWindow)
	}
	if appLimited {
		return
	}
	gradient := math.Max(0.5, math.Min(1, a.cfg.Tolerance*a.long/short))
	target := a.est*gradient + math.Sqrt(a.est)
	est := a.est*(1-a.cfg.Smoothing) + target*a.cfg.Smoothing
	a.est = math.Max(float64(a.cfg.Min), math.Min(float64(a.cfg.Max), est))
	a.limit.Store(int64(a.est))
}
