// Package guard is floodgate's front door: a policy file and a few
// options in, the whole chain out, wired in the one right order and safe
// for a fleet of replicas by default.
//
//	g, err := guard.New(ctx,
//		guard.WithPolicyFile("policy.yaml"),          // watched; a bad edit leaves the old policy in force
//		guard.WithRedisURL(os.Getenv("REDIS_URL")),   // or WithInProcess() for one instance
//		guard.WithService("shop"),                    // the fleet whose live instances share the limits
//		guard.WithServeMux(mux))
//	if err != nil { ... }
//	defer g.Close(context.Background())
//	http.ListenAndServe(addr, g.HTTP(mux))
//	srv := grpc.NewServer(g.ServerOptions()...)
//
// What it builds, from the bottom up:
//
//   - the rate-limit store: in process (WithInProcess), or Redis
//     (WithRedisURL, WithRedisClient) timed by the OpenTelemetry observer
//     and guarded by package fallback's circuit breaker, whose local
//     limiters share each rule among the live instances of the service
//     (package fleet, heartbeats in the same Redis under the key
//     "fg:fleet:{SERVICE}"; WithKeyPrefix puts a prefix before it and
//     before every bucket's key, for environments sharing one Redis),
//     so six replicas with Redis down admit the limit, not six times it;
//     and a local-first store above it for the policy's leased and async
//     rules, sharing by the same count;
//   - the four stages, in the order that keeps every promise: the
//     priority load shedder (the policy's shedder: section; without one
//     an adaptive capacity that starts at 64 requests in flight and
//     follows the service's latency, never below 8; a cpu_target there
//     is read against the container's CPU, package shedder/cpu, and a
//     memory_target against GOMEMLIMIT or the cgroup's memory limit,
//     package shedder/mem), then
//     the fleet-wide shedder when the policy has shedder: fleet:, the
//     in-flight limiter (concurrency: global:, 1024 without it, and the
//     per-key caps of concurrency: per_key:, which are made at New: a
//     reload changes them, and one added later waits for a restart) and
//     the adaptive one when the policy has concurrency: adaptive:, then
//     the hierarchical rate limits. A request shed or refused a slot is
//     never charged a rate limit;
//   - OpenTelemetry: every decision's span attributes and metrics, the
//     requests in flight per stage, the store's call durations and the
//     breaker's state, on the global providers unless WithMeterProvider
//     and WithTracerProvider say otherwise, with no further hook;
//   - identities: the policy file's identity: section says where the
//     user, tenant, API key, plan tier and client address come from
//     (headers or gRPC metadata, claims of a verified token through
//     WithClaims, trusted proxies, the IP prefix a bucket covers), so
//     the common cases need no Go; a rule keyed on an identity nothing
//     provides is refused at New with its line, unless the rule says
//     what a request without it gets (when_missing: skip or deny);
//   - the transports: net/http middleware (HTTP), the gRPC server's
//     interceptors (ServerOptions, UnaryServer, StreamServer) and client
//     interceptors (DialOptions), and for connect-go what package
//     connectmw takes (Interceptor, Chain). ServerOptions also decides
//     the shedder early, in a grpc.InTapHandle that runs when a call's
//     headers arrive, before its message is read and decoded and before
//     a handler goroutine starts: under a flood, refusing a call costs
//     little more than reading its headers. The rest of the chain (the
//     fleet-wide shedder, the in-flight limiters, the rate limits) runs
//     in the interceptors after the message is decoded, and the
//     interceptors end the tap's admission with the call (with
//     WithLoadReports the shedder stays in the interceptors, so that a
//     shed call's trailer carries the load report);
//   - the calls the service makes: RoundTripper (an http.RoundTripper for
//     the http.Client that calls a third party) and the outbound client
//     interceptors DialOptions adds charge them to the policy's outbound:
//     section, in the same store stack (a rule of 50/s is the fleet's),
//     and stop every replica's calls to a host (gRPC: a service) while it
//     asked to back off: a 429 or 503 with Retry-After, a RESOURCE_EXHAUSTED
//     with RetryInfo, shared through the same Redis (package
//     internal/cooldown); a refused call is not sent;
//   - with WithLoadReports, ORCA load reports of the chain's utilisation
//     in every gRPC call's trailer (ServerOptions) and on the
//     out-of-band stream (RegisterLoadReports), so clients balancing
//     with weighted_round_robin send a busy replica less before it
//     sheds; LoadReport returns what is reported.
//
// One Close(ctx) stops the policy watch and shuts down in the order that
// loses no unit: the local-first store reports and returns its leases,
// the fallback hands what it admitted locally over to Redis, the fleet
// membership is left, then the Redis store and client close.
//
// Its parts stay readable: Limiter (the policy in force, Inspect),
// Shedder (in flight, capacity) and Fallback (the breaker's state and
// the counters of what was decided without Redis); WithOnBreakerChange
// tells the breaker's changes as they happen.
//
// Who is denied: every denial of the rate limits and of the per-key
// in-flight caps is counted by rule and principal (the user, tenant, API
// key (hashed) or client address the rule keys on) in a summary of fixed
// memory over the last minute, with no per-principal metric; TopDenied
// returns a rule's most denied principals and TopDeniedHandler serves them
// as JSON for `floodgate top` (mount it on an admin listener).
//
// What this package decides: the order of the stages, the store stack,
// the defaults above and that a fleet's share follows live membership.
// Everything it builds comes from the packages below it, which stay
// available for wiring of one's own.
package guard
