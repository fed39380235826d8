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

// AdaptiveConfig configures NewAdaptive. Zero fields take the defaults
// noted; other values out of range are errors.
type AdaptiveConfig struct {
	// Name is the policy name in Decisions (default "adaptive-concurrency").
	Name string
	// Initial, Min and Max bound the limit: 1 <= Min <= Initial <= Max.
	// Defaults 20, 1, 1000.
	Initial, Min, Max int64
	// Window is the least time between limit updates (default 1s).
	Window time.Duration
	// MinSamples is the least number of latencies per update (default 10).
	MinSamples int
	// Smoothing in (0, 1] weighs each new target (default 0.2).
	Smoothing float64
	// Tolerance >= 1 is how much above its long-run level latency may rise
	// before the limit shrinks (default 1.5).
	Tolerance float64
	// LongWindow >= 1 is the number of windows the long-run latency
	// averages over (default 60).
	LongWindow int
	// RetryAfter of a deny (default DefaultRetryAfter).
	RetryAfter time.Duration
	// Clock (default floodgate.SystemClock).
	Clock floodgate.Clock
}

// NewAdaptive returns an adaptive limiter, or an error naming every bad
// field of cfg.
func NewAdaptive(cfg AdaptiveConfig) (*Adaptive, error) {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Initial, 20)
	def(&cfg.Min, 1)
	def(&cfg.Max, 1000)
	if cfg.Name == "" {
		cfg.Name = "adaptive-concurrency"
	}
	if cfg.Window == 0 {
		cfg.Window = time.Second
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 10
	}
	if cfg.Smoothing == 0 {
		cfg.Smoothing = 0.2
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 1.5
	}
	if cfg.LongWindow == 0 {
		cfg.LongWindow = 60
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Clock == nil {
		cfg.Clock = floodgate.SystemClock
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("concurrency: adaptive: "+format, args...))
	}
	if cfg.Min < 1 || cfg.Min > cfg.Initial || cfg.Initial > cfg.Max {
		bad("limits must satisfy 1 <= Min <= Initial <= Max, got Min %d, Initial %d, Max %d", cfg.Min, cfg.Initial, cfg.Max)
	}
	if cfg.Window < 0 {
		bad("Window %s is negative", cfg.Window)
	}
	if cfg.MinSamples < 0 {
		bad("MinSamples %d is negative", cfg.MinSamples)
	}
	if !(cfg.Smoothing > 0 && cfg.Smoothing <= 1) {
		bad("Smoothing %v is out of range (0, 1]", cfg.Smoothing)
	}
	if !(cfg.Tolerance >= 1) || math.IsInf(cfg.Tolerance, 0) {
		bad("Tolerance %v must be a finite number >= 1", cfg.Tolerance)
	}
	if cfg.LongWindow < 0 {
		bad("LongWindow %d is negative", cfg.LongWindow)
	}
	if cfg.RetryAfter < 0 {
		bad("RetryAfter %s is negative", cfg.RetryAfter)
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

// Estimate returns the unrounded limit.
func (a *Adaptive) Estimate() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.est
}

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
			done := func() {
				if once.CompareAndSwap(false, true) {
					a.sample(a.clock.Now().Sub(start), n+1)
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
