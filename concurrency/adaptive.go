package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/field"
)

// AdaptiveAlgorithm names how an Adaptive limiter moves its limit at the end of a
// window. Each is a windowed form of the Netflix concurrency-limits
// algorithm of the same name; the package documentation gives the rules.
type AdaptiveAlgorithm uint8

// Adaptive algorithms.
const (
	// Gradient2 (the default) compares the window's latency with its
	// long-run level: the limit grows by about sqrt(limit) per window
	// while they agree within Tolerance and shrinks in proportion when
	// latency rises above it.
	Gradient2 AdaptiveAlgorithm = iota
	// Vegas estimates the queue from the window's latency and the least
	// latency seen (the no-load latency): it grows the limit while the
	// queue is short and shrinks it when the queue is long.
	Vegas
	// AIMD adds one to the limit per window that used at least half of it
	// and multiplies it by Backoff on a window with a dropped request (or
	// whose latency exceeds Timeout).
	AIMD
)

var algorithmNames = [...]string{"gradient2", "vegas", "aimd"}

func (a AdaptiveAlgorithm) known() bool { return int(a) < len(algorithmNames) }

// String returns the lower-case name of a: "gradient2", "vegas" or "aimd".
func (a AdaptiveAlgorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// UnmarshalText sets a from its name as written by String; case and
// surrounding spaces are ignored (encoding.TextUnmarshaler, so the
// type decodes from YAML, JSON and flags).
func (a *AdaptiveAlgorithm) UnmarshalText(text []byte) error {
	s := string(text)
	t := strings.ToLower(strings.TrimSpace(s))
	for i, n := range algorithmNames {
		if n == t {
			*a = AdaptiveAlgorithm(i)
			return nil
		}
	}
	return fmt.Errorf("concurrency: unknown adaptive algorithm %q (want gradient2, vegas or aimd)", s)
}

// MarshalText returns the name String writes; an unknown value is an
// error.
func (a AdaptiveAlgorithm) MarshalText() ([]byte, error) {
	if !a.known() {
		return nil, fmt.Errorf("unknown %s", a)
	}
	return []byte(a.String()), nil
}

// Adaptive is an in-flight limiter whose cap is learnt from the latency and
// the outcomes of the requests it admits, a floodgate.Admitter. Put it in
// the chain where a fixed Limiter would go (after the shedder); it can sit
// beside a Limiter, which then holds the per-key and fleet caps. See the
// package documentation ("Adaptive limit") for what it decides.
//
// It is safe for concurrent use. Admit is a compare-and-swap; Done (one
// small allocation per admitted request, which carries its start time)
// takes a mutex to record the sample.
type Adaptive struct {
	inflight atomic.Int64
	limit    atomic.Int64 // floor of est, what Admit compares against

	clock floodgate.Clock

	mu       sync.Mutex
	cfg      AdaptiveConfig // guarded by mu; cfgName and retry mirror it for Admit
	cfgName  atomic.Pointer[string]
	retry    atomic.Int64
	bypass   atomic.Uint32 // cfg.Bypass
	est      float64       // the limit, unrounded
	alg      algState
	win      window
	rng      *rand.Rand
	windows  int64 // windows closed so far
	lastSeen windowStats
	wait     waiters // requests waiting for a slot (cfg.Wait)
}

var _ floodgate.Admitter = (*Adaptive)(nil)

// AdaptiveConfig configures NewAdaptive and Reconfigure. The zero value of
// every field is its default, so AdaptiveConfig{} is a valid configuration
// (Gradient2); NewAdaptive reports a bad field by its policy file key
// (max_samples). The fields under
// an algorithm's heading are read only by that algorithm.
type AdaptiveConfig struct {
	// Name is the policy name in Decisions; "" means
	// "adaptive-concurrency".
	Name string
	// Algorithm is how the limit moves; the zero value is Gradient2.
	Algorithm AdaptiveAlgorithm
	// Initial is the limit to start from; 0 means 20, or Min when Min is
	// above 20 (and Max when Max is below it). It must lie in [Min, Max].
	// Reconfigure ignores it and keeps the current limit, clamped to the
	// new [Min, Max].
	Initial int64
	// Min is the least the limit falls to (the floor); 0 means 1. It must
	// be >= 1.
	Min int64
	// Max is the most the limit grows to (the ceiling); 0 means 1000. It
	// must be >= Min.
	Max int64
	// Window is the least time between limit updates; 0 means 1s. It must
	// not be negative.
	Window time.Duration
	// MinSamples is the least number of latency samples a window needs to
	// move the limit (a window with a dropped request needs none); 0 means
	// 10. It must not be negative.
	MinSamples int
	// MaxSamples is how many latencies a window keeps for its percentile
	// (a uniform reservoir sample of them when more arrive); 0 means 1000.
	// It must not be negative.
	MaxSamples int
	// Percentile is the latency quantile a window reports, in (0, 1]
	// (nearest rank); 0 means 0.5, the median. Higher values react to the
	// tail sooner and are noisier.
	Percentile float64
	// Backoff multiplies the limit on a window in which a request was
	// dropped (floodgate.OutcomeDropped: deadline passed, the handler
	// answered overloaded); 0 means 0.9. It must lie in [0.5, 1).
	Backoff float64
	// RetryAfter is the RetryAfter of a deny; 0 means DefaultRetryAfter. It
	// must not be negative.
	RetryAfter time.Duration
	// Clock is what latencies and windows are read from; nil means
	// floodgate.SystemClock(). Reconfigure keeps the Clock the limiter was
	// built with.
	Clock floodgate.Clock
	// Bypass, when set, admits requests of this priority and above
	// whatever the limit (Netflix's bypass resolver): they are counted in
	// flight and timed like the others, so they still teach the limit and
	// take room from the rest, but are never refused. The limiter knows
	// no other priorities: put the shedder before it. The zero value,
	// floodgate.PriorityUnspecified, bypasses nothing.
	Bypass floodgate.Priority

	// Wait lets a request that finds the limit reached wait up to
	// Wait.Max for a slot instead of being denied at once; the zero value
	// denies at once. Its keys are wait.max, wait.queue, wait.order.
	Wait Wait

	// Gradient2.

	// Smoothing weighs each new target against the current limit; 0 means
	// 0.2. It must lie in (0, 1].
	Smoothing float64
	// Tolerance is how far above its long-run level the window's latency
	// may rise before the limit shrinks; 0 means 1.5. It must be a finite
	// number >= 1.
	Tolerance float64
	// LongWindow is the number of windows the long-run latency averages
	// over; 0 means 600 (ten minutes of 1s windows: a short one lets
	// the long-run level follow a sustained overload, and the limit with
	// it). It must not be negative.
	LongWindow int

	// Vegas.

	// Alpha and Beta bound the estimated queue, in multiples of
	// max(1, log10(limit)): below Alpha the limit grows, above Beta it
	// shrinks. 0 means 3 and 6; they must satisfy 1 <= Alpha < Beta.
	Alpha, Beta float64
	// ProbeEvery is after how many windows the no-load latency is
	// forgotten and measured again, so that a service that became slower
	// for good is not throttled forever; 0 means 60. It must not be
	// negative.
	ProbeEvery int

	// AIMD.

	// Timeout is the window latency above which AIMD backs off as on a
	// drop; 0 means none. It must not be negative.
	Timeout time.Duration
}

// withDefaults returns cfg with every zero field set to its default.
func (cfg AdaptiveConfig) withDefaults() AdaptiveConfig {
	orDefault(&cfg.Name, "adaptive-concurrency")
	orDefault(&cfg.Min, 1)
	orDefault(&cfg.Max, 1000)
	if cfg.Initial == 0 {
		cfg.Initial = min(max(20, cfg.Min), cfg.Max)
	}
	orDefault(&cfg.Window, time.Second)
	orDefault(&cfg.MinSamples, 10)
	orDefault(&cfg.MaxSamples, 1000)
	orDefault(&cfg.Percentile, 0.5)
	orDefault(&cfg.Backoff, 0.9)
	orDefault(&cfg.RetryAfter, DefaultRetryAfter)
	orDefault(&cfg.Smoothing, 0.2)
	orDefault(&cfg.Tolerance, 1.5)
	orDefault(&cfg.LongWindow, 600)
	orDefault(&cfg.Alpha, 3)
	orDefault(&cfg.Beta, 6)
	orDefault(&cfg.ProbeEvery, 60)
	if cfg.Clock == nil {
		cfg.Clock = floodgate.SystemClock()
	}
	cfg.Wait = cfg.Wait.withDefaults()
	return cfg
}

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports every bad field of cfg, its defaults applied, by its
// key in the policy file ("concurrency: AdaptiveConfig: smoothing: 2 is
// out of range (0, 1]"), or nil.
func (cfg AdaptiveConfig) Validate() error {
	return cfg.withDefaults().check("AdaptiveConfig", true)
}

// check reports the bad fields of cfg (defaults applied), each error
// "concurrency: <who>: <key>: <problem>" around a *field.Error, so that
// the policy file's loader finds the key without reading the message;
// initial says whether Initial is checked.
func (cfg AdaptiveConfig) check(who string, initial bool) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("concurrency: %s: %w", who, field.Errorf(key, format, args...)))
	}
	if !cfg.Bypass.Valid() {
		bad("bypass", "%d is not a known priority", uint8(cfg.Bypass))
	}
	if int(cfg.Algorithm) >= len(algorithmNames) {
		bad("algorithm", "%d is not a known algorithm (Gradient2, Vegas, AIMD)", uint8(cfg.Algorithm))
	}
	if cfg.Min < 1 {
		bad("min", "%d must be >= 1", cfg.Min)
	}
	if cfg.Max < cfg.Min {
		bad("max", "%d must be >= min %d", cfg.Max, cfg.Min)
	}
	if initial && (cfg.Initial < cfg.Min || cfg.Initial > cfg.Max) {
		bad("initial", "%d must lie in [min %d, max %d]", cfg.Initial, cfg.Min, cfg.Max)
	}
	if cfg.Window < 0 {
		bad("window", "%s is negative", cfg.Window)
	}
	if cfg.MinSamples < 0 {
		bad("min_samples", "%d is negative", cfg.MinSamples)
	}
	if cfg.MaxSamples < 0 {
		bad("max_samples", "%d is negative", cfg.MaxSamples)
	}
	if !(cfg.Percentile > 0 && cfg.Percentile <= 1) {
		bad("percentile", "%v is out of range (0, 1]", cfg.Percentile)
	}
	if !(cfg.Backoff >= 0.5 && cfg.Backoff < 1) {
		bad("backoff", "%v is out of range [0.5, 1)", cfg.Backoff)
	}
	if cfg.RetryAfter < 0 {
		bad("retry_after", "%s is negative", cfg.RetryAfter)
	}
	if !(cfg.Smoothing > 0 && cfg.Smoothing <= 1) {
		bad("smoothing", "%v is out of range (0, 1]", cfg.Smoothing)
	}
	if !(cfg.Tolerance >= 1) || math.IsInf(cfg.Tolerance, 0) {
		bad("tolerance", "%v must be a finite number >= 1", cfg.Tolerance)
	}
	if cfg.LongWindow < 0 {
		bad("long_window", "%d is negative", cfg.LongWindow)
	}
	if !(cfg.Alpha >= 1) || !(cfg.Beta > cfg.Alpha) || math.IsInf(cfg.Beta, 0) {
		bad("alpha", "%v and beta %v must satisfy 1 <= alpha < beta (finite)", cfg.Alpha, cfg.Beta)
	}
	if cfg.ProbeEvery < 0 {
		bad("probe_every", "%d is negative", cfg.ProbeEvery)
	}
	if cfg.Timeout < 0 {
		bad("timeout", "%s is negative", cfg.Timeout)
	}
	for _, e := range cfg.Wait.fieldErrors("wait") {
		errs = append(errs, fmt.Errorf("concurrency: %s: %w", who, e))
	}
	return errors.Join(errs...)
}

// NewAdaptive returns an adaptive limiter, or an error naming every bad
// field of cfg by key ("concurrency: NewAdaptive: smoothing: 2 is out of
// range (0, 1]").
func NewAdaptive(cfg AdaptiveConfig) (*Adaptive, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check("NewAdaptive", true); err != nil {
		return nil, err
	}
	a := &Adaptive{clock: cfg.Clock, est: float64(cfg.Initial), rng: rand.New(rand.NewPCG(1, 2))}
	a.wait.init(cfg.Wait, cfg.Clock, a.try)
	a.setConfig(cfg)
	a.limit.Store(cfg.Initial)
	a.win.start = cfg.Clock.Now()
	return a, nil
}

// setConfig installs cfg (defaults applied, valid); mu held or a not yet
// shared.
func (a *Adaptive) setConfig(cfg AdaptiveConfig) {
	if cfg.Algorithm != a.cfg.Algorithm {
		a.alg = algState{}
	}
	a.cfg = cfg
	name := cfg.Name
	a.cfgName.Store(&name)
	a.retry.Store(int64(cfg.RetryAfter))
	a.bypass.Store(uint32(cfg.Bypass))
	a.wait.set(cfg.Wait)
}

// Reconfigure replaces the limiter's settings at run time (a policy
// reload). It keeps the current limit, clamped to the new [Min, Max], the
// requests in flight and, unless the Algorithm changes, what the algorithm
// learnt; cfg.Initial and cfg.Clock are ignored. A bad cfg is reported by
// field, as NewAdaptive does, and changes nothing.
func (a *Adaptive) Reconfigure(cfg AdaptiveConfig) error {
	cfg.Clock = a.clock
	cfg = cfg.withDefaults()
	if err := cfg.check("Reconfigure", false); err != nil {
		return err
	}
	if err := a.wait.checkScopes(cfg.Wait); err != nil {
		return err
	}
	a.mu.Lock()
	cfg.Initial = a.cfg.Initial
	if cfg.Initial < cfg.Min || cfg.Initial > cfg.Max {
		cfg.Initial = min(max(cfg.Initial, cfg.Min), cfg.Max)
	}
	a.setConfig(cfg)
	if len(a.win.samples) > cfg.MaxSamples {
		a.win.samples = a.win.samples[:cfg.MaxSamples]
	}
	a.setEstimate(a.est)
	a.mu.Unlock()
	a.wait.wake() // a higher limit lets waiting requests in
	return nil
}

// RequireScopes is told by the transport (package interceptor) which
// identities it fills: with strict (WithStrictIdentity, and package
// guard), a Wait whose Fairness is by an identity not among them is an
// error, now and at every Reconfigure, for it would count every request
// as one caller's.
func (a *Adaptive) RequireScopes(transport string, resolvable []string, strict bool) error {
	return a.wait.requireScopes(resolvable, strict)
}

// Config returns the limiter's settings, defaults applied.
func (a *Adaptive) Config() AdaptiveConfig {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// Limit returns the current cap on requests in flight.
func (a *Adaptive) Limit() int64 { return a.limit.Load() }

// InFlight returns the requests in flight.
func (a *Adaptive) InFlight() int64 { return a.inflight.Load() }

// Admit implements floodgate.Admitter. With AdaptiveConfig.Wait, a
// request that finds the limit reached waits for a slot (see the package
// documentation, "Waiting for a slot").
func (a *Adaptive) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	if a.wait.enabled() && a.wait.n.Load() > 0 && !a.bypasses(r) {
		return a.wait.wait(ctx, r, nil)
	}
	d, done, _, _ := a.try(r)
	if d.Allowed {
		return d, a.wait.hold(r, done), nil
	}
	if !a.wait.enabled() {
		return d, done, nil
	}
	return a.wait.wait(ctx, r, &d)
}

// bypasses reports whether r's priority is admitted whatever the limit.
func (a *Adaptive) bypasses(r *floodgate.Request) bool {
	bypass := floodgate.Priority(a.bypass.Load())
	return bypass != floodgate.PriorityUnspecified && r.Priority >= bypass
}

// try admits r if fewer than Limit() requests are in flight (or r
// bypasses the limit); a deny refuses every request (all).
func (a *Adaptive) try(r *floodgate.Request) (floodgate.Decision, floodgate.Done, bool, error) {
	for {
		n := a.inflight.Load()
		limit := a.limit.Load()
		if n >= limit && !a.bypasses(r) {
			return floodgate.Decision{
				Allowed: false, Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
				Policy: *a.cfgName.Load(), Limit: limit, RetryAfter: time.Duration(a.retry.Load()), Priority: r.Priority,
			}, nil, true, nil
		}
		if a.inflight.CompareAndSwap(n, n+1) {
			start := a.clock.Now()
			var once atomic.Bool
			done := func(res floodgate.Result) {
				if once.CompareAndSwap(false, true) {
					a.finish(res.Outcome, start, n+1)
					a.inflight.Add(-1)
					a.wait.freed()
				}
			}
			return floodgate.Decision{
				Allowed: true, Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
				Policy: *a.cfgName.Load(), Limit: limit, Remaining: max(limit-n-1, 0), Priority: r.Priority,
			}, done, false, nil
		}
	}
}

// Waiting returns the requests waiting for a slot now.
func (a *Adaptive) Waiting() int { return int(a.wait.n.Load()) }

// finish records how one admitted request ended: a latency sample on
// success, a drop on OutcomeDropped, nothing on OutcomeFailed and
// OutcomeIgnored (a later stage denied it, the client went away, the
// handler failed in a way that says nothing of load). inflight is the
// in-flight count its request saw when admitted, itself included.
func (a *Adaptive) finish(o floodgate.Outcome, start time.Time, inflight int64) {
	switch o {
	case floodgate.OutcomeSuccess, floodgate.OutcomeDropped:
	default:
		return
	}
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	w := &a.win
	w.maxInflight = max(w.maxInflight, inflight)
	if o == floodgate.OutcomeDropped {
		w.drops++
	} else {
		w.add(now.Sub(start), a.cfg.MaxSamples, a.rng)
	}
	if now.Sub(w.start) < a.cfg.Window || (w.drops == 0 && w.seen < a.cfg.MinSamples) {
		return
	}
	st := w.close(a.cfg.Percentile)
	w.reset(now)
	a.windows++
	a.lastSeen = st
	a.setEstimate(a.alg.update(&a.cfg, a.est, st))
}

// setEstimate clamps est to [Min, Max] and publishes it; mu held.
func (a *Adaptive) setEstimate(est float64) {
	a.est = math.Max(float64(a.cfg.Min), math.Min(float64(a.cfg.Max), est))
	a.limit.Store(int64(a.est))
}

// window collects one window's samples.
type window struct {
	start       time.Time
	samples     []float64 // seconds; a reservoir of at most MaxSamples
	seen        int       // samples offered, kept or not
	drops       int
	maxInflight int64
}

// add offers one latency to the reservoir (Algorithm R).
func (w *window) add(rtt time.Duration, maxSamples int, rng *rand.Rand) {
	w.seen++
	if len(w.samples) < maxSamples {
		w.samples = append(w.samples, rtt.Seconds())
		return
	}
	if j := rng.IntN(w.seen); j < maxSamples {
		w.samples[j] = rtt.Seconds()
	}
}

// windowStats is what a closed window reports to the algorithm.
type windowStats struct {
	rtt         float64 // the window's latency percentile, seconds; 0 when no samples
	samples     int
	drops       int
	maxInflight int64
}

func (w *window) close(percentile float64) windowStats {
	st := windowStats{samples: w.seen, drops: w.drops, maxInflight: w.maxInflight}
	if n := len(w.samples); n > 0 {
		slices.Sort(w.samples)
		i := int(math.Ceil(percentile*float64(n))) - 1
		st.rtt = w.samples[min(max(i, 0), n-1)]
	}
	return st
}

func (w *window) reset(now time.Time) {
	w.start, w.samples, w.seen, w.drops, w.maxInflight = now, w.samples[:0], 0, 0, 0
}
