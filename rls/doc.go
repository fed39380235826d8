// Package rls serves Envoy's global rate limiting API,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, from a
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
// # Serving
//
// Server.Register adds the service to a grpc.Server; Server.Serve runs a
// gRPC server with the standard health service (grpc.health.v1: "" and
// the RateLimitService name) and shuts it down gracefully: health turns
// NOT_SERVING, calls in flight finish (up to WithDrainTimeout), then the
// listener closes. The policy follows reloads of the Limiter
// (policyfile.Watch): the mapping and the rules swap together, and a bad
// reload keeps the policy in force. Command floodgate-rls (cmd/) puts it
// all together: serve-rls, and translate, which turns an
// envoyproxy/ratelimit configuration into a floodgate policy (package
// translate).
package rls
