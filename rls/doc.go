// Package rls serves Envoy's global rate limiting API,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, and its
// rate limit quota service (RLQS, see "Quota leases: RLQS"), from a
// floodgate policy: the gateway (Envoy, Istio) and the services behind it
// decide with one policy and spend one budget.
//
// # What it decides
//
// A call names a domain and a list of descriptors, each a list of (key,
// value) entries (Envoy sends one descriptor per rate_limit action that
// produced one). The policy's rls: section (tiers.RLSDomain) maps each
// descriptor shape of a domain to a rule and says which entry fills which
// part of the request: remote_address fills ip, a tenant header fills
// tenant, and so on. A descriptor is resolved, by package tiers, into a
// floodgate.Request with that identity, limited to its rule; its bucket
// key is built by the very code that builds the services' keys (escaping
// and hashing every client-influenced value), so a descriptor and a
// service request with the same identity charge the same bucket, the same
// Redis key, and no descriptor value can name another principal's bucket.
//
// All descriptors of one call are decided together, all or nothing, in one
// store Take (tiers.Limiter.AdmitDescriptors): a call denied at one
// descriptor charges nothing at any other, unlike envoyproxy/ratelimit,
// which increments every other descriptor's counter. Shadow rules never
// deny (the shadow descriptor reports OK); a store failure is decided rule
// by rule by on_store_error, and a fallback store (package fallback) keeps
// deciding locally while Redis is down. The limiter's store may be any
// store: memstore, Redis behind the fallback, a tiers/localfirst store for
// leased and async rules.
//
// The answer, per descriptor, in the order of the call:
//
//   - a descriptor whose rule admits it: OK; one that denies: OVER_LIMIT.
//     The call's overall_code is OVER_LIMIT when any descriptor denies,
//     and then nothing was charged.
//   - current_limit is the binding bucket's rate: requests_per_unit per
//     unit (times unit_multiplier: 100/10m is 100 per 10 MINUTE), named
//     by the mapping's name or the rule's (with "/<period>" for one window
//     of a rule with several); limit_remaining and duration_until_reset
//     are the bucket's remaining and time until full, and limit_remaining
//     is 0 on OVER_LIMIT (and for a shadow rule that would deny), as
//     envoyproxy/ratelimit answers, whatever the uncharged bucket holds. A rule that hides
//     its quota (hide_quota) reports neither limit nor remaining, so
//     Envoy's own X-RateLimit headers cannot leak it.
//   - a descriptor that matches no mapping (or a call whose domain the
//     policy does not name) is OK with no current_limit: not limited, as
//     envoyproxy/ratelimit answers (limit_remaining 0), and so is one
//     that matches a no_limit mapping. An unlimited mapping, and a client
//     in the exempt list, is OK with limit_remaining 4294967295, as
//     envoyproxy/ratelimit answers unlimited: true; a descriptor replaced by another's limit
//     (replaces) is OK with nothing charged. A descriptor whose value keys
//     no bucket (an ip entry that is no address) is OK, not limited, and
//     its decision names the rule in floodgate.skipped.
//   - hits_addend is the cost: the call's (0 counts as 1) or, when set,
//     the descriptor's own (0 checks without charging), unless the rule
//     has a cost of its own. A cost above the rule's capacity denies with
//     no Retry-After.
//
// response_headers_to_add carries the draft-ietf-httpapi-ratelimit-headers-10
// fields for the client, as the services' interceptors send them:
// RateLimit-Policy ("name";q=<limit>;w=<window seconds>) and RateLimit
// ("name";r=<remaining>;t=<seconds>), one item per limited descriptor that
// does not hide its quota and is not a shadow rule, and Retry-After
// (seconds, rounded up) on a deny. WithResponseHeaders(false) leaves them
// out.
//
// A descriptor's own limit (limit, which Envoy sends from dynamic
// metadata) decides it instead of the mapping, in a domain the policy
// names: requests_per_unit per unit (times unit_multiplier) in a fixed
// window, in a bucket of its own keyed as envoyproxy/ratelimit keys its
// counter (the domain, every entry and the period), reported with an
// unnamed current_limit; 0 always denies. is_negative_hits gives the
// descriptor's hits back to the buckets it would be charged, through the
// store's Settle (quota.Settler), so Envoy's per-request pattern (hits
// when a request starts, the same hits negative when its stream ends)
// counts requests in flight; such a descriptor is OK and decides nothing.
//
// Calls are refused with INVALID_ARGUMENT, charging nothing, for an empty
// domain, no descriptors or more than tiers.MaxDescriptors, a descriptor
// without entries, and a limit override with no unit (or a period beyond
// a year). Envoy then applies its failure_mode_deny.
//
// # Telemetry
//
// Every descriptor's decision is passed to the Observer (WithObserver;
// package otel's Observer adds the floodgate.* span attributes and counts
// floodgate.decisions), the binding one last, with the request the
// descriptor was resolved as: metrics count descriptors by rule, and the
// span of the call carries the binding decision.
//
// # Quota leases: RLQS
//
// QuotaServer serves Envoy's rate limit quota service,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas,
// from the same policy: Envoy no longer asks per request, it sorts
// requests into buckets, spends an assignment it holds, and reports
// usage every 5 s on one stream. A bucket id (Envoy's bucket_id_builder,
// a map) of a domain with quota: true matches the domain's descriptor
// whose entries have its keys (tiers.Limiter.QuotaBuckets) and names the
// buckets a ShouldRateLimit descriptor with those entries charges: the
// edge's quota, its RLS calls and the services spend one budget.
//
//   - Charging. A report's num_requests_allowed joins its bucket's
//     backlog; every tick (WithQuotaTick) the backlog is charged to the
//     bucket through the store's quota.Reporter, at most 1.25 × this
//     server's part of a tick's refill per tick, so a report's lump (5 s
//     of usage) is never charged to a bucket that holds one second of
//     it. Each charge call is named (server instance, sequence) and a
//     call whose reply is lost is resolved (quota.Reporter.Resolve), at
//     once or at a later tick, never sent again blindly: a report is
//     charged once. (A report is named by its stream and its place on
//     it: a gRPC stream neither repeats nor reorders, and Envoy never
//     sends a report again, so the charge is where it could be doubled.)
//   - Shares. Each client's claim on a bucket, its demand ((allowed +
//     denied) / time_elapsed) and the rate it holds, sits on a board (in
//     process; in Redis next to the bucket with WithQuotaRedis, for
//     several servers) until its TTL. A client wants its max-min fair
//     share of the rule's rate r among the claims (a demand asks a tenth
//     more and 1/s more, an unknown one everything; what no claim asks is
//     split equally), and the board grants it, atomically, at most what
//     the other claims leave of r: the claims never sum above r, and a
//     share that grows waits for the others to shrink, which the servers
//     push at their next tick (shrinking claims first).
//   - Assignments are token buckets: tokens_per_fill per fill_interval of
//     1 to 10 whole seconds, the one that loses least of the grant
//     (33.3/s is 100 per 3 s), max_tokens a quarter second of it, at least
//     1; a grant below 1 per 10 s, or an exhausted bucket, is DENY_ALL. A
//     grant at most 2% above what the client holds keeps its
//     configuration (a new token bucket starts full). The TTL runs a
//     second past the client's next report: the cadence is the longest
//     of its last three time_elapsed (whole seconds; 5 s until known),
//     and an assignment sent with a report lives cadence + 2 s (Envoy: 7
//     s; an unset TTL would expire at once). An id no rule limits is
//     ALLOW_ALL, a deny descriptor DENY_ALL, one the policy cannot
//     resolve gets no assignment (no_assignment_behavior decides).
//   - Exhaustion. A bucket that absorbs none of its backlog for max(2 s,
//     2 ticks, 2 units' refill), because something else (services, RLS
//     calls) spends all of it, is exhausted: its clients are pushed
//     DENY_ALL, within that span of the first report it cannot absorb,
//     until it has absorbed the backlog down to its capacity.
//   - Reloads. After a policy reload every bucket id is resolved again;
//     one that now maps to other buckets or to none (its rule or
//     descriptor removed) is abandoned (AbandonAction): the client drops
//     it and, at its next request, reports it afresh under the new
//     policy. A rule whose rate changed keeps its buckets at the new rate.
//   - Lost clients. A stream that ends takes its claims off the board at
//     once (the others get its share at the next tick); a client silent
//     for 2 × cadence + 2 s is dropped too. A server shutting down ends its
//     streams; their clients keep their assignments until the TTL and
//     reconnect.
//
// The bound. For one bucket of rate r, the fleet of RLQS clients admits
// over any period [0, t]
//
//	admitted ≤ r·t + Σ max_tokens(a) + U + F + L
//
// where Σ runs over the token-bucket assignments that started full (one a
// client received with a configuration it did not hold; with steady
// demand, one or two per client and bucket), U is what
// no_assignment_behavior admitted (a bucket's requests before its first
// assignment: one round trip; 0 with DENY_ALL), F what
// expired_assignment_behavior admitted (0 while the servers answer: the
// TTL outlives the cadence; fallback rate × time otherwise), and L the
// assignments of streams lost while their client lives on (a network
// partition: rate × TTL each; 0 for a client killed). It holds because
// the granted claims never sum above r, each client's token bucket fills
// at most at its grant, and a claim leaves the board no earlier than its
// client's assignment expires, but for L (and the reply's trip time).
// rlqs-bench (cmd/rlqs-bench) prints the bound of each run. When other
// consumers spend the same bucket, the ledger bounds the total: they and
// the fleet admit at most r·t + capacity + what the fleet had not
// charged when the bucket was found exhausted, Σ a·(cadence + 2 s) + r ×
// (exhaust span + tick).
//
// # Serving
//
// Server.Register adds the service to a grpc.Server; Server.Serve runs a
// gRPC server with the standard health service (grpc.health.v1: "" and
// the RateLimitService name) and shuts it down gracefully: health turns
// NOT_SERVING, calls in flight finish (up to WithDrainTimeout), then the
// listener closes. The policy follows reloads of the Limiter
// (policyfile.Watch): the mapping and the rules swap together, and a bad
// reload keeps the policy in force. Command floodgate-rls (cmd/) puts it
// all together: serve-rls (both services on one port), and translate, which turns an
// envoyproxy/ratelimit configuration into a floodgate policy (package
// translate).
package rls
