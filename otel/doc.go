// Package otel decides how floodgate shows up in OpenTelemetry: what each
// decision adds to the request's span (attributes and an event; no span of
// its own), which metrics count decisions, store calls, circuit breaker
// states and requests in flight, and under which names and attributes —
// bounded in number whatever the traffic, and never carrying a caller's
// identity in the clear.
//
// It follows the OpenTelemetry instrumentation contract: WithTracerProvider
// and WithMeterProvider default to the global providers, the scope is
// ScopeName (this import path), instrument errors go to otel.Handle, and only
// the OpenTelemetry API is imported, never the SDK.
//
//	obs, err := otel.New() // global providers
//	fg, err := interceptor.New(interceptor.WithObserver(obs))
//	srv := grpc.NewServer(
//		grpc.StatsHandler(otelgrpc.NewServerHandler()),
//		grpc.ChainUnaryInterceptor(fg.UnaryServer(limits)),
//	)
//
// # Spans
//
// Observe does not start spans: it annotates the span already in the
// request's context (the server span otelgrpc or otelhttp started). When
// that span is not recording, nothing span-related is done. Each decision
// adds a span event named "floodgate.decision" carrying the attributes
// below, so every stage a request passed is on the trace; and each
// decision sets the same attributes on the span itself, last writer wins.
// Because a chain stops at the first stage that denies, the span's
// attributes describe the denying decision of a denied request, and the
// last stage's decision (usually the rate limits) of an admitted one.
//
//	attribute               type     value
//	floodgate.decision      string   allowed | limited | shed | concurrency_limited
//	floodgate.stage         string   shedder | concurrency | tiers (Decision.Stage)
//	floodgate.policy        string   binding policy (rule) name; may be empty
//	floodgate.source        string   store | cache | local_fallback | fail_open | fail_closed | shedder | concurrency | lease | async | policy
//	floodgate.limit         int      quota or capacity of the binding policy
//	floodgate.remaining     int      quota left after this request
//	floodgate.retry_after   double   seconds to wait before retrying (0 on allow)
//	floodgate.priority      string   critical | write | read | test | unspecified | invalid
//	floodgate.shadow        bool     a shadow (dry-run) rule would have denied
//	floodgate.degraded      bool     decided without the primary store (fallback)
//	floodgate.key_hash      string   16 hex digits identifying the caller (see below); absent when anonymous
//	floodgate.skipped       string   rules skipped for lack of identity (Decision.Skipped); absent when none
//	floodgate.waited        double   seconds a max_wait rule held the request (Decision.Waited); absent when it did not wait
//	floodgate.soft_exceeded string   soft limits the admitted request went over, comma-separated (Decision.SoftExceeded); absent when none
//	error.type              string   on events only, when the stage returned an error: canceled | timeout | refused | reset | noscript | oom | redirect | _OTHER
//
// The decision is floodgate.Decision.Label: "allowed", or the Label of the
// denying stage's floodgate.Semantics: "shed" when the shedder stage
// denies, "concurrency_limited" when the concurrency stage denies, and
// "limited" when any other stage denies. A denial by the local over-limit cache is "limited" with source
// "cache". The priority is the Decision's, or the Request's when the
// Decision leaves it unspecified.
//
// Spans carry limit and remaining even when the binding rule hides its
// quota (Decision.HideQuota): that flag governs what clients are told, and
// traces are the operator's.
//
// # Identity
//
// Identity never leaves the process raw. floodgate.key_hash is an
// HMAC-SHA-256 of the principal (the API key if set, else the user, else
// the tenant, else the IP), keyed by a secret (WithKeyHashSecret; a random
// per-process secret by default, so a guessable value such as an IPv4
// address cannot be recovered by hashing candidates). KeyHash computes it
// for a known caller so operators can look that caller up in traces.
// Identity values never appear on metrics at all.
//
// # Metrics
//
// Names are dotted with snake_case segments, without _total, in
// UCUM units. No attribute carries a user, API key, tenant or IP.
//
//	metric                                  instrument            unit          attributes
//	floodgate.decisions                     Int64Counter          {decision}    floodgate.stage, .decision, .policy, .source, .priority, .shadow
//	floodgate.cache.hits                    Int64Counter          {hit}         floodgate.policy
//	floodgate.soft_exceeded                 Int64Counter          {request}     floodgate.policy
//	floodgate.store.duration                Float64Histogram      s             error.type (only on failed calls)
//	floodgate.in_flight                     Int64UpDownCounter    {request}     floodgate.stage
//	floodgate.fallback.breaker.state        Int64ObservableGauge  1             floodgate.breaker.name, floodgate.breaker.state
//	floodgate.fallback.breaker.transitions  Int64Counter          {transition}  floodgate.breaker.name, .from, .to
//
// floodgate.decisions counts every decision of every stage; it covers what
// other libraries count separately: shed requests by priority are
// floodgate.decisions{floodgate.decision="shed"} by floodgate.priority,
// fallback decisions are those whose floodgate.source is local_fallback,
// fail_open or fail_closed, and shadow denials are floodgate.shadow=true.
// floodgate.cache.hits counts the decisions whose source is "cache" (the
// over-limit cache answered without a store round trip), by policy.
// floodgate.soft_exceeded counts the requests admitted over a soft rate
// limit (package tiers, soft: true; quota mode), one for each soft limit
// a request went over, by that limit's name: the overage to bill.
// floodgate.fallback.breaker.state reports, per breaker, 1 for its current
// state and 0 for the others (closed, half_open, open), from the first
// BreakerStateChanged call on.
//
// # Hooks
//
// Decisions are observed through Observe. What decisions do not show comes
// through hooks wired next to the stages: Store wraps a quota.Store so each
// Take is timed (with a "floodgate.store" child span when the request's
// span is recording), forwarding every capability of the store it wraps
// (Settle, Report and Resolve, DecidesOnStoreError, Close) and
// naming it through Unwrap, so settle, max_wait and local-first rules work
// over an instrumented store as over the store itself; or a store calls
// RecordStoreCall / StartStoreCall itself; BreakerStateChanged is called from the fallback store's
// WithOnStateChange callback; TrackInFlight (or AddInFlight) counts
// requests in flight per stage.
//
//	obs, _ := otel.New()
//	guarded, _ := fallback.New(obs.Store(redisStore), fallback.WithInstances(members.Count), fallback.WithOnStateChange(
//		func(name string, from, to gobreaker.State) { obs.BreakerStateChanged(name, from.String(), to.String()) }))
//	lf, _ := localfirst.New(guarded, redisStore) // for leased and async rules
//	limits, _ := tiers.NewLimiter(lf, policy)
//	chain := obs.TrackInFlight(floodgate.Chain{shed, conc, limits})
//	fg, _ := interceptor.New(interceptor.WithObserver(obs), interceptor.WithServeMux(mux))
//	handler := fg.HTTP(chain)(mux)
//
// Package guard wires all of this, with nothing to add.
//
// # Cardinality
//
// Policy names come from the operator's policy and are few,
// but the observer guards anyway: after WithMaxPolicies distinct names
// (default 100) every new name is recorded as "_other"; custom Stage and
// Source values beyond the ones package floodgate defines are capped at 8
// each, and breaker names at 32, the same way. The number of series is
// therefore bounded whatever the traffic.
//
// # Cost
//
// Attribute sets are built once per distinct series and cached in
// copy-on-write maps read without locks, so with a span that is not
// recording Observe does not allocate once its series is cached
// (TestObserveNoopDoesNotAllocate holds it to that); a recording span costs
// the attributes, the event and the key hash. BenchmarkObserve in
// otel/sdktest measures both against the SDK.
package otel
