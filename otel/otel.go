package otel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/cause"
)

// Caps on distinct attribute values.
const (
	// defaultMaxPolicies caps policy names, see WithMaxPolicies.
	defaultMaxPolicies = 100
	// maxExtraStages and maxExtraSources cap custom Stage and Source
	// values beyond the ones package floodgate defines.
	maxExtraStages  = 8
	maxExtraSources = 8
	// maxBreakers caps distinct breaker names.
	maxBreakers = 32
)

// The names this package records under: its instrumentation scope, the
// span event of a decision, the attribute keys (each documented in the
// package doc) and the values of floodgate.breaker.state.
const (
	// ScopeName is the instrumentation scope name of the tracer and meter
	// this package uses: its import path.
	ScopeName = "github.com/floodgate-go/floodgate/otel"
	// Version is the instrumentation scope version reported with
	// ScopeName.
	Version = "0.1.0"

	// EventDecision is the name of the span event added for every
	// decision.
	EventDecision = "floodgate.decision"

	// Attribute keys.
	AttrDecision     = attribute.Key("floodgate.decision")
	AttrStage        = attribute.Key("floodgate.stage")
	AttrPolicy       = attribute.Key("floodgate.policy")
	AttrLimit        = attribute.Key("floodgate.limit")
	AttrRemaining    = attribute.Key("floodgate.remaining")
	AttrRetryAfter   = attribute.Key("floodgate.retry_after")
	AttrSource       = attribute.Key("floodgate.source")
	AttrPriority     = attribute.Key("floodgate.priority")
	AttrShadow       = attribute.Key("floodgate.shadow")
	AttrDegraded     = attribute.Key("floodgate.degraded")
	AttrKeyHash      = attribute.Key("floodgate.key_hash")
	AttrSkipped      = attribute.Key("floodgate.skipped")
	AttrWaited       = attribute.Key("floodgate.waited")
	AttrSoftExceeded = attribute.Key("floodgate.soft_exceeded")
	AttrBreaker      = attribute.Key("floodgate.breaker.name")
	AttrBreakerState = attribute.Key("floodgate.breaker.state")
	AttrBreakerFrom  = attribute.Key("floodgate.breaker.from")
	AttrBreakerTo    = attribute.Key("floodgate.breaker.to")
	AttrErrorType    = attribute.Key("error.type")

	// Circuit breaker states as they appear in floodgate.breaker.state.
	BreakerClosed   = "closed"
	BreakerHalfOpen = "half_open"
	BreakerOpen     = "open"
)

// stageNames are the floodgate.stage values every Observer knows from the
// start, beyond its cap: the empty stage and every kind package floodgate
// defines.
func stageNames() []string {
	names := []string{""}
	for _, s := range floodgate.Stages() {
		names = append(names, string(s))
	}
	return names
}

// priorityInvalid is the metric priority index of a Priority outside the
// named ones.
const priorityInvalid = uint8(floodgate.NumPriorities)

func priorityName(i uint8) string {
	if i == priorityInvalid {
		return "invalid"
	}
	return floodgate.Priority(i).String()
}

// Option configures an Observer. A bad option makes New fail, naming it.
type Option func(*config)

type config struct {
	tp          trace.TracerProvider
	mp          metric.MeterProvider
	maxPolicies int
	secret      []byte
	clock       floodgate.Clock
	errs        []error
}

// WithTracerProvider sets the TracerProvider whose tracer starts the store
// call spans of StartStoreCall. Decisions are recorded on the span already
// in the request's context, whichever provider started it. The default is
// otel.GetTracerProvider() at the time New is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return notNil("WithTracerProvider", "provider", tp, func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the MeterProvider that creates the instruments.
// The default is otel.GetMeterProvider() at the time New is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return notNil("WithMeterProvider", "provider", mp, func(c *config) { c.mp = mp })
}

// WithMaxPolicies caps the number of distinct floodgate.policy values on
// metrics (default 100). Policy names come from the operator's policy
// file, so they are few; the cap is a guard: once n distinct names have
// been seen, every further name is recorded as "_other". n must be between
// 1 and 10000.
func WithMaxPolicies(n int) Option {
	return func(c *config) {
		if n < 1 || n > 10000 {
			c.errs = append(c.errs, fmt.Errorf("otel: WithMaxPolicies: %d is out of range [1, 10000]", n))
			return
		}
		c.maxPolicies = n
	}
}

// WithKeyHashSecret sets the secret that keys floodgate.key_hash (an
// HMAC-SHA-256 of the principal). Observers that share a secret give the
// same hash for the same principal, so traces from every replica of a
// service correlate. Without this option each process draws a random
// secret at start-up, and hashes only correlate within one process. The
// secret must be at least 16 bytes; it is copied.
func WithKeyHashSecret(secret []byte) Option {
	return func(c *config) {
		if len(secret) < 16 {
			c.errs = append(c.errs, fmt.Errorf("otel: WithKeyHashSecret: secret is %d bytes, want at least 16", len(secret)))
			return
		}
		c.secret = append([]byte(nil), secret...)
	}
}

// WithClock sets the clock StartStoreCall times store calls with (default
// floodgate.SystemClock()).
func WithClock(clk floodgate.Clock) Option {
	return notNil("WithClock", "clock", clk, func(c *config) { c.clock = clk })
}

// notNil returns an Option that applies set, or records that the option
// called name was given a nil what (v).
func notNil(name, what string, v any, set func(*config)) Option {
	return func(c *config) {
		if v == nil {
			c.errs = append(c.errs, fmt.Errorf("otel: %s: %s is nil", name, what))
			return
		}
		set(c)
	}
}

// Observer is a floodgate.Observer that annotates the current span and
// records metrics for every decision. It also has hooks for what decisions
// do not show: store call durations (RecordStoreCall, StartStoreCall),
// circuit breaker state (BreakerStateChanged) and requests in flight
// (TrackInFlight, AddInFlight). It is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer
	meter  metric.Meter
	clock  floodgate.Clock

	decisions          metric.Int64Counter
	cacheHits          metric.Int64Counter
	storeDuration      metric.Float64Histogram
	inFlight           metric.Int64UpDownCounter
	breakerTransitions metric.Int64Counter
	softExceeded       metric.Int64Counter

	policies *interner
	stages   *interner
	sources  *interner

	series    cowMap[seriesKey, *series]
	stageOpts cowMap[uint16, []metric.AddOption]
	softOpts  cowMap[uint16, []metric.AddOption] // floodgate.soft_exceeded, by interned policy
	storeOpts [numErrorTypes][]metric.RecordOption

	hasher   *keyHasher
	breakers *breakerSet
}

var _ floodgate.Observer = (*Observer)(nil)

// seriesKey identifies one floodgate.decisions series by interned values.
type seriesKey struct {
	policy, stage, source uint16
	priority              uint8
	allowed, shadow       bool
}

// series holds the prebuilt measurement options of one series, so the
// request path neither builds attribute sets nor allocates.
type series struct {
	decisions []metric.AddOption
	cache     []metric.AddOption // floodgate.cache.hits: policy only
}

// New returns an Observer. Its error names every bad option (a nil Option
// is one). Errors creating instruments are passed to otel.Handle, as the
// OpenTelemetry contract asks, and never fail New: the instrument the
// provider returned with the error is used, or a no-op one if it returned
// none.
func New(opts ...Option) (*Observer, error) {
	c := config{maxPolicies: defaultMaxPolicies, clock: floodgate.SystemClock()}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("otel: nil Option"))
			continue
		}
		o(&c)
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, err
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	hasher, err := newKeyHasher(c.secret)
	if err != nil {
		return nil, fmt.Errorf("otel: %w", err)
	}
	o := &Observer{
		tracer:   c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		clock:    c.clock,
		policies: newInterner(c.maxPolicies, ""),
		stages:   newInterner(maxExtraStages, stageNames()...),
		sources: newInterner(maxExtraSources, "",
			string(floodgate.SourceStore), string(floodgate.SourceCache), string(floodgate.SourceLocalFallback),
			string(floodgate.SourceFailOpen), string(floodgate.SourceFailClosed),
			string(floodgate.SourceShedder), string(floodgate.SourceConcurrency),
			string(floodgate.SourceLease), string(floodgate.SourceAsync), string(floodgate.SourcePolicy)),
		hasher: hasher,
	}
	meter := c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	o.meter = meter
	o.decisions = instrument[metric.Int64CounterOption](meter, metric.Meter.Int64Counter, "floodgate.decisions",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions made by floodgate stages, by stage, decision, policy, source, priority and shadow."))
	o.cacheHits = instrument[metric.Int64CounterOption](meter, metric.Meter.Int64Counter, "floodgate.cache.hits",
		metric.WithUnit("{hit}"),
		metric.WithDescription("Requests denied by the local over-limit cache without asking the store, by policy."))
	o.storeDuration = instrument[metric.Float64HistogramOption](meter, metric.Meter.Float64Histogram, "floodgate.store.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of rate-limit store calls; error.type is set when the call failed."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1))
	o.inFlight = instrument[metric.Int64UpDownCounterOption](meter, metric.Meter.Int64UpDownCounter, "floodgate.in_flight",
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests admitted by a stage and not yet finished, by stage."))
	o.breakerTransitions = instrument[metric.Int64CounterOption](meter, metric.Meter.Int64Counter, "floodgate.fallback.breaker.transitions",
		metric.WithUnit("{transition}"),
		metric.WithDescription("Circuit breaker state changes, by breaker, previous and new state."))
	o.softExceeded = instrument[metric.Int64CounterOption](meter, metric.Meter.Int64Counter, "floodgate.soft_exceeded",
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests admitted over a soft rate limit (quota mode), by the soft limit's policy name."))
	o.breakers = newBreakerSet(maxBreakers)
	_, err = meter.Int64ObservableGauge("floodgate.fallback.breaker.state",
		metric.WithUnit("1"),
		metric.WithDescription("Circuit breaker state: 1 for the breaker's current state, 0 for the others."),
		metric.WithInt64Callback(o.breakers.observe))
	handle(err)
	for i := range o.storeOpts {
		if i == errNone {
			o.storeOpts[i] = []metric.RecordOption{metric.WithAttributeSet(*attribute.EmptySet())}
			continue
		}
		o.storeOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(AttrErrorType.String(errorTypeNames[i])))}
	}
	return o, nil
}

// instrument creates the instrument name with create (a metric.Meter
// method) on meter. An error goes to otel.Handle and does not fail New: the
// instrument the provider returned with it is used, or the no-op meter's
// when it returned none.
func instrument[O, T any](meter metric.Meter, create func(metric.Meter, string, ...O) (T, error), name string, opts ...O) T {
	inst, err := create(meter, name, opts...)
	handle(err)
	if any(inst) == nil {
		inst, _ = create(metricnoop.Meter{}, name, opts...)
	}
	return inst
}

// handle passes err, when not nil, to otel.Handle. The prefix names the
// library as well as the package: the global handler also receives the
// errors of OpenTelemetry itself and of every other instrumentation.
func handle(err error) {
	if err != nil {
		otel.Handle(fmt.Errorf("floodgate/otel: %w", err))
	}
}

// Observe implements floodgate.Observer: it counts d in floodgate.decisions
// (and floodgate.cache.hits when the over-limit cache answered) and, when
// the span in ctx is recording, adds a floodgate.decision event to it and
// sets the floodgate.* span attributes to d. When a request passes several
// stages, each adds its event and the span attributes end up describing the
// last decision observed: the denying stage's (a chain stops there), or the
// last stage's when all allowed. r may be nil.
func (o *Observer) Observe(ctx context.Context, r *floodgate.Request, d floodgate.Decision, err error) {
	prio := d.Priority
	if prio == floodgate.PriorityUnspecified && r != nil {
		prio = r.Priority
	}
	pi := uint8(prio)
	if !prio.Valid() {
		pi = priorityInvalid
	}
	k := seriesKey{
		policy:   o.policies.lookup(d.Policy),
		stage:    o.stages.lookup(string(d.Stage)),
		source:   o.sources.lookup(string(d.Source)),
		priority: pi,
		allowed:  d.Allowed,
		shadow:   d.Shadow,
	}
	s, ok := o.series.load(k)
	if !ok {
		s = o.series.loadOrStore(k, func() *series { return o.newSeries(k) })
	}
	o.decisions.Add(ctx, 1, s.decisions...)
	if d.Source == floodgate.SourceCache {
		o.cacheHits.Add(ctx, 1, s.cache...)
	}
	if d.SoftExceeded != "" && d.Allowed {
		o.countSoft(ctx, d.SoftExceeded)
	}

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	o.annotate(span, r, d, pi, err)
}

// newSeries builds the options of series k. Its floodgate.decision label
// is the stage's (floodgate.Decision.Label): a stage beyond the cap
// ("_other") is one that package floodgate does not define, whose denies
// are "limited".
func (o *Observer) newSeries(k seriesKey) *series {
	policy := attribute.String(string(AttrPolicy), o.policies.name(k.policy))
	stage := o.stages.name(k.stage)
	return &series{
		decisions: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			AttrStage.String(stage),
			AttrDecision.String(floodgate.Decision{Allowed: k.allowed, Stage: floodgate.Stage(stage)}.Label()),
			policy,
			AttrSource.String(o.sources.name(k.source)),
			AttrPriority.String(priorityName(k.priority)),
			AttrShadow.Bool(k.shadow),
		))},
		cache: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(policy))},
	}
}

func (o *Observer) annotate(span trace.Span, r *floodgate.Request, d floodgate.Decision, prio uint8, err error) {
	var kv [15]attribute.KeyValue
	kv[0] = AttrDecision.String(d.Label())
	kv[1] = AttrStage.String(string(d.Stage))
	kv[2] = AttrPolicy.String(d.Policy)
	kv[3] = AttrSource.String(string(d.Source))
	kv[4] = AttrLimit.Int64(d.Limit)
	kv[5] = AttrRemaining.Int64(d.Remaining)
	kv[6] = AttrRetryAfter.Float64(d.RetryAfter.Seconds())
	kv[7] = AttrPriority.String(priorityName(prio))
	kv[8] = AttrShadow.Bool(d.Shadow)
	kv[9] = AttrDegraded.Bool(d.Source.Degraded())
	n := 10
	if r != nil {
		if h := o.hasher.hash(r.Identity); h != "" {
			kv[n] = AttrKeyHash.String(h)
			n++
		}
	}
	if d.Skipped != "" {
		kv[n] = AttrSkipped.String(d.Skipped)
		n++
	}
	if d.Waited > 0 {
		kv[n] = AttrWaited.Float64(d.Waited.Seconds())
		n++
	}
	if d.SoftExceeded != "" {
		kv[n] = AttrSoftExceeded.String(d.SoftExceeded)
		n++
	}
	span.SetAttributes(kv[:n]...)
	if err != nil {
		kv[n] = AttrErrorType.String(errorTypeNames[classify(err)])
		n++
	}
	span.AddEvent(EventDecision, trace.WithAttributes(kv[:n]...))
}

// KeyHash returns the floodgate.key_hash value for id: 16 hex digits of an
// HMAC-SHA-256, keyed by the observer's secret, of the principal — the API
// key if set, else the user, else the tenant, else the IP — prefixed by
// which of them it is, so a user and an API key with the same text hash
// differently. It returns "" when id names nobody. Operators use it to find
// one caller's requests in traces without the raw value ever being exported.
func (o *Observer) KeyHash(id floodgate.Identity) string { return o.hasher.hash(id) }

// Error types of error.type on floodgate.store.duration and on decision
// events: "canceled" for the caller's cancellation, else the cause of the
// failure, classified as package fallback counts it (timeout, refused,
// reset, noscript, oom, redirect), and "_OTHER".
const (
	errNone     = 0
	errCanceled = 1
	// errCause + a cause index; the last cause, other, is "_OTHER".
	errCause      = 2
	numErrorTypes = errCause + cause.N
)

var errorTypeNames = func() (n [numErrorTypes]string) {
	n[errCanceled] = "canceled"
	for i, c := range cause.Names {
		n[errCause+i] = c
	}
	n[numErrorTypes-1] = "_OTHER"
	return n
}()

func classify(err error) int {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, context.Canceled):
		return errCanceled
	}
	return errCause + cause.Index(err)
}

// RecordStoreCall records one rate-limit store call of duration d in
// floodgate.store.duration. err is the call's error; a non-nil err sets
// error.type to "canceled" (context.Canceled) or the failure's cause:
// "timeout", "refused", "reset", "noscript", "oom", "redirect" or "_OTHER". A store, or the fallback wrapper around
// it, calls this after each Take; a deny is not an error.
func (o *Observer) RecordStoreCall(ctx context.Context, d time.Duration, err error) {
	o.storeDuration.Record(ctx, d.Seconds(), o.storeOpts[classify(err)]...)
}

// StartStoreCall starts a "floodgate.store" span (a child of the span in
// ctx, from the configured TracerProvider) and returns the context to make
// the store call with and a function to call, once, with the call's error
// when it returns. That function ends the span, marking it as an error
// when err is non-nil, and records the call's duration, measured on the
// observer's clock, as RecordStoreCall does.
func (o *Observer) StartStoreCall(ctx context.Context) (context.Context, func(err error)) {
	start := o.clock.Now()
	ctx, span := o.tracer.Start(ctx, "floodgate.store", trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, func(err error) {
		o.RecordStoreCall(ctx, o.clock.Now().Sub(start), err)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, errorTypeNames[classify(err)])
		}
		span.End()
	}
}

// AddInFlight adds delta to floodgate.in_flight for stage: +1 when a stage
// admits a request, -1 when that request's Done runs. TrackInFlight does
// this for any Admitter.
func (o *Observer) AddInFlight(ctx context.Context, stage floodgate.Stage, delta int64) {
	o.inFlight.Add(ctx, delta, o.stageOption(stage)...)
}

// countSoft adds one to floodgate.soft_exceeded for each soft limit
// named in names (Decision.SoftExceeded), under its floodgate.policy,
// interned and capped as on floodgate.decisions: never a principal.
func (o *Observer) countSoft(ctx context.Context, names string) {
	for name := range strings.SplitSeq(names, ",") {
		i := o.policies.lookup(name)
		opt, ok := o.softOpts.load(i)
		if !ok {
			opt = o.softOpts.loadOrStore(i, func() []metric.AddOption {
				return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(AttrPolicy.String(o.policies.name(i))))}
			})
		}
		o.softExceeded.Add(ctx, 1, opt...)
	}
}

func (o *Observer) stageOption(stage floodgate.Stage) []metric.AddOption {
	i := o.stages.lookup(string(stage))
	if opt, ok := o.stageOpts.load(i); ok {
		return opt
	}
	return o.stageOpts.loadOrStore(i, func() []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(AttrStage.String(o.stages.name(i))))}
	})
}

// TrackInFlight returns an Admitter that counts the requests a admits in
// floodgate.in_flight, under the stage its Decision names, until their
// Done runs. If a is a floodgate.Chain, each stage is wrapped, so each is
// counted. It does not report decisions: combine it with the Observer
// (interceptor.WithObserver) for those. The wrapper follows floodgate's
// unwrap convention, so what the stage offers (a policy's methods:, the
// headers it reads) is still found through it.
func (o *Observer) TrackInFlight(a floodgate.Admitter) floodgate.Admitter {
	if c, ok := a.(floodgate.Chain); ok {
		out := make(floodgate.Chain, len(c))
		for i, s := range c {
			out[i] = o.TrackInFlight(s)
		}
		return out
	}
	return inFlightAdmitter{a: a, o: o}
}

type inFlightAdmitter struct {
	a floodgate.Admitter
	o *Observer
}

// Unwrap returns the Admitter w counts (floodgate's unwrap convention), so
// that the interceptors find what the wrapped stage offers.
func (w inFlightAdmitter) Unwrap() floodgate.Admitter { return w.a }

func (w inFlightAdmitter) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	d, done, err := w.a.Admit(ctx, r)
	if !d.Allowed {
		return d, done, err
	}
	opt := w.o.stageOption(d.Stage)
	w.o.inFlight.Add(ctx, 1, opt...)
	// The decrement must not depend on the request's context, which is
	// usually cancelled by the time Done runs.
	bg := context.WithoutCancel(ctx)
	return d, func(res floodgate.Result) {
		if done != nil {
			done(res)
		}
		w.o.inFlight.Add(bg, -1, opt...)
	}, err
}
