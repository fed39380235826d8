// Package tiers is floodgate's rate-limit stage: the policy (plan tiers,
// rules, scopes, costs, overrides), its YAML form with validation and hot
// reload, the resolution of a floodgate.Request into the buckets to charge,
// the Store contract those buckets are charged through, and the Limiter,
// the floodgate.Admitter that puts them together.
//
// # The policy
//
// A policy names tiers (rate, burst, algorithm per plan), rules, per-key
// overrides and per-method options; see Policy and the YAML sketch in
// testdata/policy.yaml. Load validates everything and reports every
// problem, each with its field path and line:
//
//	rules[2].rate: "5/minute" is not N/duration, at line 14
//
// Unknown and repeated fields are errors, and so are YAML aliases, a second
// document and an empty file (a truncated file must not lift every limit).
// A rule whose cost exceeds its capacity, in any tier or override it can
// meet, is a load error: such a request could never pass.
//
// # What this package decides
//
// Rules and levels. Every rule that matches a request is one level; the
// request is admitted only if every level admits it, and a Store charges
// all levels or none (a deny by the tenant level leaves the user and IP
// buckets exactly as they were). A rule with no match applies to every
// method; a method glob uses path.Match, so '*' never crosses a '/'; an
// HTTP route pattern ("GET /v1/items/{id}") is compared literally. A rule
// keyed on a scope the request does not have (no user, no valid IP, ...)
// does not apply to that request, and the Decision names it in Skipped:
// pair such rules with an IP rule as a safety net. A rule that no request
// can ever key (user with no user extractor) is a mistake: a transport
// declares what it fills with RequireScopes (package interceptor does),
// and such a rule is then warned about once, or refused. Buckets are
// ordered most specific first: rules with more key scopes first, then
// policy order.
//
// Address lists. exempt: and deny: list networks (CIDRs or addresses).
// A request whose client address is in deny is denied before any rule
// (Policy "deny", Source policy, quota hidden, RetryAfter 0); one in
// exempt is allowed without charging anything (Policy "exempt"); deny
// wins where both hold. An override's ip may be a network too (an office
// range at a higher rate): every client bucket inside it takes the
// override's rate, the longest prefix winning.
//
// Costs. A rule's own cost wins over everything; otherwise the request's
// Cost (if > 0), otherwise 1. Request.Cost is resolved by the transport
// (package interceptor: the policy's methods: first, then the Go map, then
// the proto annotation), the same however the interceptors are wired. A negative request Cost is denied with ErrInvalidCost. A request cost
// larger than a rule's capacity can never be admitted: Admit denies it
// without calling the store, with RetryAfter 0 (waiting cannot cure it),
// and returns an error wrapping ErrCostExceedsCapacity.
//
// Tiers. A rule with rate "tier" uses the limit (rate, burst, algorithm)
// of the request's Tier; an empty or unknown Tier uses the policy's
// default_tier, which a policy with such a rule must name. An override
// gives one key of one rule its own rate; its algorithm defaults to the
// rule's (token bucket for a tier rule).
//
// The binding bucket. On deny, the denying bucket with the longest
// RetryAfter binds; on allow, the bucket with the least Remaining (ties go
// to the most specific). The Decision carries its rule name (Policy),
// Limit (the bucket's capacity: burst for token bucket and GCRA, the rate
// for the window algorithms), Window (the rule's period), Remaining, Reset,
// RetryAfter, the rule's HideQuota, and the Store's Source (store when it
// says nothing). A request no rule matches is allowed without a store
// call, with an empty Policy and Source.
//
// Shadow rules (dry run) never deny and never block real rules: they are
// charged in a second Take, made only after the real rules allowed. If a
// shadow rule would deny, the request is still allowed, the shadow buckets
// are charged nothing, and the Decision has Shadow set and describes the
// shadow rule (Policy, Limit, Remaining; RetryAfter stays 0 as on every
// allow), so telemetry can count what the rule would have done.
// Transports should not send quota headers from a Shadow decision.
//
// Store failures. on_store_error is applied in one place,
// DecideUnavailable: "closed" denies (Source fail_closed, RetryAfter
// StoreErrorRetryAfter), "open" allows (fail_open), and "local" (the
// default) is decided by local golang.org/x/time/rate limiters, which live
// in package fallback: a Store that wraps the primary store and answers
// every Take itself. Over a store without that fallback a "local" rule
// cannot be honoured and acts as "open"; NewLimiter and SetPolicy log a
// warning naming each such rule (memstore, which has nothing to lose, and
// fallback stores are exempt). When the store fails, Admit returns an
// error wrapping the store's, for logs.
//
// # Keys
//
// A bucket key names the rule, the algorithm and the identity:
//
//	<prefix>{<scope0>=<v0>}:<rule>[:<scopeI>=<vI>]...:<algorithm>   keyed rule
//	<prefix>{<rule>}:<algorithm>                                    rule without key
//
// The prefix is "fg:" unless WithKeyPrefix says otherwise. The "{...}" is
// the Redis Cluster hash tag: a rule's first key scope and its value, so
// the levels of one principal that start with the same scope share a slot;
// a rule without key is tagged with its name. Identity values are escaped
// injectively (every byte outside [A-Za-z0-9._-] becomes %XX); values
// longer than 64 bytes are replaced by '#' and 32 hex digits of their
// SHA-256; API keys are always hashed that way, never stored raw. An IP
// is keyed on the network of its rule's prefix length: ipv4_prefix (32,
// one address, by default) and ipv6_prefix (64 by default: an IPv6 client
// commonly owns a whole /64 and can rotate addresses in it at will), the
// address alone for a full-length prefix ("192.0.2.1") and the masked
// prefix otherwise ("2001:db8:1:2::/64"). An IPv4-mapped IPv6 address
// (::ffff:192.0.2.1) is keyed, listed and overridden as the IPv4 address
// it maps, and zones are dropped: one client, one key. Escaped
// values never contain '#', ':', '=', '{' or '}', so no client input can
// make one principal's key equal another's or choose a hash tag. Override
// values are written raw in the policy and go through the same escaping
// and hashing. Keys name the algorithm, so changing a rule's algorithm
// starts its buckets afresh, while changing its rate keeps them.
//
// # Reload
//
// Limiter.SetPolicy swaps a validated policy in atomically; Watch polls a
// file's content and does so on every change. A policy that fails to load
// leaves the one in force deciding and is reported (callback and log).
package tiers
