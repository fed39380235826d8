// Package tiers is floodgate's rate-limit stage: the policy (plan tiers,
// rules, scopes, costs, overrides), its YAML form with validation, the
// resolution of a floodgate.Request into the buckets to charge (through
// the store contract of package quota), and the Limiter, the
// floodgate.Admitter that puts them together. Reloading a policy file is
// package policyfile's.
//
// # The policy
//
// A policy names tiers (rate, burst, algorithm per plan), rules, per-key
// overrides and per-method options; see Policy and the YAML sketch in
// testdata/policy.yaml. Load validates everything and reports every
// problem, each with its field path and line:
//
//	rules[2].rate: "5/minute" is not N/duration (write 5/1m), at line 14
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
// HTTP route pattern ("GET /v1/items/{id}") is compared literally. A
// match may also name header values and plan tiers (see Matches beyond
// the method); every condition of a match must hold. A rule
// keyed on a scope the request does not have (no user, no valid IP, ...)
// does not apply to that request, and the Decision names it in Skipped:
// pair such rules with an IP rule as a safety net. A rule that no request
// can ever key (user with no user extractor) is a mistake: a transport
// declares what it fills with RequireScopes (package interceptor does),
// and such a rule is then warned about once, or refused, naming its line.
// A rule says what a request without its scope gets with when_missing:
// skip (the above, chosen: never reported) or deny (denied before
// anything is charged, Policy the rule's name, Source policy, quota
// hidden, RetryAfter 0). Buckets are
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
// (package interceptor: a positive WithCost estimate, else the policy's
// methods:, then the Go map, then the proto annotation), once per call for
// every stage. A negative request Cost is denied with ErrInvalidCost. A request cost
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
// Windows. A tier, rule or override may have several windows, written
// rate: [100/1m, 1000/1h] (and burst: [20, 1000]). Each window is its own
// bucket, keyed by its period, and one more level of the same
// all-or-nothing take: a deny by the hour window charges nothing at the
// minute window, nor at any other rule. A window of a limit with several
// is named "<rule>/<period>" ("tenant-plan/1h", the period as Rate.String
// writes it), so names stay valid RFC 9651 Strings; a limit with one
// window keeps the rule's name and its key, so a policy that uses no
// windows decides, names and keys everything as before. Going from one
// window to several starts the rule's buckets afresh (their keys gain the
// period). The Decision names the binding window, and lists every window
// the transports should report in Decision.Quotas: the binding rule's
// windows and, on a deny, every other violated window (one
// google.rpc.QuotaFailure violation each), never those of a rule that
// hides its quota. Quotas is nil, allocating nothing, when the binding
// window is all there is.
//
// Matches beyond the method. match: {header: {x-client-type: [ios,
// android]}} matches a request whose first value of that header is one of
// those (exact, case-sensitive values; case-insensitive names; a request
// without the header does not match); match: {tier: [free]} matches the
// tier a rate "tier" rule would charge (Request.Tier if it is one of the
// policy's tiers, else default_tier). A key may name a header as a scope,
// key: [tenant, header:x-region]: each value is its own bucket, escaped or
// hashed like every identity component. The transport copies into
// Request.Headers only the headers the policy in force names
// (Limiter.RequestHeaders), and declares it does with the "header" scope
// of RequireScopes. A header is what the client sent unless an edge proxy
// sets it: it is no identity. A header match lets a client that drops the
// header escape the rule, and a header scope lets a client that rotates
// values multiply its budget, so a header scope goes next to a scope the
// client cannot choose, and a rule on that scope alone caps the total.
// Credential headers (authorization, proxy-authorization, cookie: use
// api_key, always hashed), forwarding headers (forwarded, x-forwarded-for,
// x-real-ip: use ip, read through trusted proxies only), host and binary
// (-bin) metadata cannot be matched or keyed on; a load error says so,
// naming the line.
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
// shadow: true at the top of a policy makes every rule a shadow rule and
// reports the deny list (Policy "deny", Shadow) without denying: a whole
// policy dark-launched. enforce_percent: N (1 to 99) rolls a rule out
// gradually: it denies only requests whose key falls in an N% share of
// all keys and is a shadow rule for the others, whose denials are reported
// the same way. The share is chosen by a stable hash (FNV-1a) of the
// rule's name and the request's key body, its identity values without
// prefix, algorithm or window (for a rule without key: of the request's
// tenant, user, API key and client /64 or address): the same principals
// on every instance and after every restart, each enforced at every
// window, and raising N only adds principals. Both follow reloads: a
// rule's buckets are the same whether shadow, rolled out or enforced, so
// enforcing a dark-launched rule starts from what it counted.
//
// Soft rules (quota mode; soft: true) never deny either, but they are
// real limits: a soft rule is taken with the enforced rules, in the same
// Take, and charged like them while the request is within its limit. When
// that Take denies only at soft rules, their buckets are left out and the
// rest is taken again (one more store call, only for a request over a
// soft limit): the request is admitted, charged nothing at the soft rules
// it is over (their buckets count what they admitted within the limit and
// never go below empty), and Decision.SoftExceeded names them, which
// package interceptor sends to the client and hands the handler, and
// package otel counts per rule. A hard rule's deny charges nothing, at
// soft rules neither, as always. A soft rule never binds a decision:
// Policy, Limit, Remaining and the transports' RateLimit fields describe
// the hard rules, and a request over a soft rule's capacity is marked
// without a take. When the store fails, a soft rule whose on_store_error
// would deny marks the request instead. AdmitMany marks each item by its
// own soft rules and the call by all of them; under AdmitAtMost a soft
// rule within its limit shares the grant like any rule (it caps it to
// what it has left), and one with nothing left is passed over and marked.
// Available reads every alternative's buckets in one Take without
// charging them and says which alternatives would be admitted now, and
// which only over a soft limit: how a gateway picks, among models,
// backends or regions, one that still has quota.
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
// # Settlement (settle)
//
// A rule with settle charges an estimate and settles it when the request
// ends: what it charges at admission is its cost as above (its own cost,
// else Request.Cost, which package interceptor's WithCost can estimate
// from the request, else 1), and Admit returns a Done (the only case it
// does). When the transport calls it with an actual cost (the handler
// called floodgate.ReportCost; Result.HasCost) the difference is charged
// or refunded on the rule's bucket, in one Settler.Settle call for every
// settling level of the request (one Redis script per cluster slot);
// floodgate.Ignored (a later stage denied the request) refunds the whole
// estimate; a Result without a cost leaves the estimate charged. Rules
// without settle keep what they charged at admission, whatever the
// Result: a request count stays one request. A settlement is never
// denied: one that overdraws the bucket is debt, which later requests wait
// out (token bucket and GCRA: RetryAfter grows by the debt over the rate;
// the window algorithms: the debt counts in the window current at
// settlement, see Algorithm, "Settlement"). Every algorithm settles, so no
// settle rule is refused at load for its algorithm. Settlement is
// synchronous in the Done, bounded by WithSettleTimeout; a failed one is
// not retried (it may or may not have been applied, never twice) and is
// logged at most once a second: the estimate then stands. The store must be a Settler (every store of this
// module is; NewLimiter and SetPolicy refuse a policy with settle or
// max_wait over one that is not, naming each rule). Shadow rules with
// settle are settled like real ones, when their take charged.
//
// Meters. A settling rule may name the meter its settlement counts,
// meter: output_tokens (Rule.Meter; 1 to 64 of [A-Za-z0-9_.-]); without
// one it counts the default meter, the request's cost above. A plan
// priced per meter (input tokens, output tokens, requests) is one rule
// per meter, all levels of one take. A meter rule charges at admission its
// own cost, else its meter's estimate (the value floodgate.ReportMeter
// recorded for that meter on the request's context before Admit: package
// interceptor's WithCost func may), else 1; never Request.Cost, which is
// the default meter's (so Envoy's hits_addend, through AdmitDescriptors,
// charges default-meter rules only, and a methods: cost is checked against
// their capacities only). When the request ends, each settling level is
// settled with its own meter's actual value: the default meter's from
// Result.Cost (HasCost), a named meter's from Result.Meters (what the
// handler last reported with floodgate.ReportMeter); a level whose meter
// has no value keeps its estimate; floodgate.Ignored refunds every level,
// whatever its meter. Every level that changes is settled in the one
// Settler.Settle call above, each bucket by its own amount, so the store
// contract is unchanged. meter: without settle is refused at load, naming
// the line: a meter is read only at settlement. AdmitMany, AdmitAtMost
// and AdmitDescriptors read no estimates and settle nothing, so there a
// meter rule charges its cost, else 1.
//
// # Waiting (max_wait)
//
// A rule with max_wait shapes instead of denying: when its bucket would
// deny a request but the request's units arrive within max_wait, the take
// itself books them (the bucket goes below empty, as x/time/rate's
// Reserve), so later requests see them spent and queue behind: waiters
// are served in order of arrival. The request then waits, inside Admit,
// on the Limiter's clock (WithClock), for the longest wait any of its
// levels booked, and proceeds with Decision.Waited set (the Observer sees
// it; package interceptor sends it as a Server-Timing metric). The wait
// is bounded by the context's deadline: max_wait is cut to the time the
// deadline leaves before the take, so a deadline shorter than the wait is
// an immediate deny with the plain RetryAfter, and nothing booked. A wait
// the context cuts short gives the request's units back on every level
// it charged (Settler.Settle with the costs negated): requests already
// queued behind keep their places, the next arrival books the freed
// units. At most max_waiters requests (default DefaultMaxWaiters) wait on
// one bucket in one process; the next is decided as if the rule had no
// max_wait (a deny with its RetryAfter), so across n processes at most n
// x max_waiters wait, and never beyond max_wait of the bucket's refill.
// Only token_bucket and gcra can book ahead: max_wait on a window
// algorithm (a rule's, a tier's the rule can meet, or an override's) is
// refused at load, naming the line, and so is max_wait with consistency
// leased (a lease spends what it holds at once). A shadow rule with
// max_wait books like the real rule would but never holds a request. A
// request that waits costs a timer and a map entry while it waits; one
// that does not wait (admitted at once, or denied) costs a lookup of the
// bucket's waiter count (BenchmarkShaping).
//
// # Calendar quotas (rate: N/month)
//
// A rule's rate may be per calendar unit: "N/day", "N/week", "N/month" or
// "N/year" (Rate.Calendar). It counts in fixed windows that start at
// midnight in the rule's time_zone (an IANA name, UTC when unset): every
// day, on week_starts (a weekday, Sunday when unset), on the first of the
// month, on January 1st; the algorithm is fixed_window (any other is
// refused). The Limiter computes the window that holds its clock's now
// (WithClock) and passes it to the store as the bucket's quota.Span, and
// the bucket's period as the window's true length: the store counts
// windows of unequal length exactly and reports their end, so
// Decision.Reset, RetryAfter and Window (and the transports' headers) are
// the calendar's. The rule's overrides count per the same unit. An
// unknown unit, zone or weekday, a calendar rate on a tier or among
// several windows, an override per another unit, or settle on such a
// rule, is refused at load, naming the line.
//
// # Partial grants (AdmitAtMost)
//
// AdmitAtMost admits up to Request.Cost units and reports how many: the
// buckets charged the request's cost are quota.Bucket.AtMost, and the
// store grants them the largest amount every one can give, all or nothing
// at that amount, in the same take as the other levels (see
// quota.Algorithm).
//
// # What the store must do
//
// A Limiter asks its store for more than Take only where the policy needs
// it, and finds each capability on the store or on a store beneath it
// (quota.Layers: package otel's store wrapper, package fallback and
// package tiers/localfirst implement Unwrap), so wrapping a store never
// hides what it can do. NewLimiter and SetPolicy refuse, naming each rule,
// a policy whose settle or max_wait rules need a Settler the store is not
// (see quota.Settles), and one whose consistency leased or async rules
// need a local-first layer the store lacks: without one such a rule would
// be decided exactly, a round trip per request, and nothing but the
// decisions' source would say so. Refusing it, as a settle rule over a
// store that cannot settle is refused, makes the mismatch between the
// policy and the wiring an error at start (and a reload the watcher logs,
// with the policy in force kept), whose fix is one line:
//
//	lf, err := localfirst.New(guarded, redisStore, localfirst.WithInstances(members.Count))
//	limits, err := tiers.NewLimiter(lf, policy)
//
// A policy file shared by processes wired differently keeps its local
// rules exact in the ones without local-first (consistency: exact, the
// default). on_store_error local is only warned about (see Store
// failures): the rule still limits while the store answers.
//
// # Keys
//
// A bucket key names the rule, the algorithm and the identity:
//
//	<prefix>{<scope0>=<v0>}:<rule>[:<scopeI>=<vI>]...:<algorithm>[:<period>]   keyed rule
//	<prefix>{<rule>}:<algorithm>[:<period>]                                    rule without key
//
// A header scope is written "header.<name>" ("{tenant=acme}:r:header.x-region=eu").
// The ":<period>" suffix is there only for a window of a limit with
// several windows, so that windows never share state.
//
// The prefix is "fg:" unless WithKeyPrefix says otherwise. The "{...}" is
// the Redis Cluster hash tag: a rule's first key scope and its value, so
// the levels of one principal that start with the same scope share a slot;
// a rule without key is tagged with its name. On a Redis Cluster a take
// whose levels share a slot is one atomic script call, and one across
// slots is a part per slot with refunds (package redisstore); starting
// every rule's key with the tenant (key: [tenant, user]) keeps a
// request's levels in its tenant's slot, at the price of keying each
// level per tenant and of a tenant's load on one master. Identity values are escaped
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
// Limiter.AppendPrincipal writes the principal of a rule's bucket for a
// person to read ("ip=203.0.113.66 user=admin", an API key hashed as in
// its key), for telling operators who is denied (package guard's
// Guard.TopDenied).
//
// # Reload
//
// Limiter.SetPolicy swaps a validated policy in atomically. Package
// policyfile watches a policy file and does so on every change; a policy
// that fails to load leaves the one in force deciding and is reported.
//
// # The rest of the policy file
//
// A policy file may also carry the load shedder's and the concurrency
// limiters' settings (shedder:, concurrency:), the transport's identity:
// and the rules of the service's own outgoing calls (outbound:, a policy of
// this package's form that package policyfile hands to a second Limiter).
// Package tiers never imports
// a stage, so Load refuses those sections with an error naming their line
// and package policyfile, which decodes the whole file and applies each
// section to its stage; a file loaded through tiers alone never drops
// them unseen. Policy implements yaml.Unmarshaler, which is how
// policyfile hands tiers the rest of the file.
package tiers
