// Package concurrency is floodgate's in-flight limiter: it decides whether
// one more request may start now, given the requests already in flight that
// it admitted and whose Done has not been called, per instance, per key on
// this instance, and per key across the whole fleet through Redis.
//
// A Limiter holds any combination of
//
//   - a global cap (WithGlobal): requests in flight on this instance;
//   - per-key caps (WithPerKey): requests in flight on this instance per
//     key, the key computed from the Request by a function (for example
//     "20 in flight per user on /search.v1.Search/Query");
//   - fleet per-key caps (WithFleetPerKey): requests in flight per key across
//     every instance sharing one Redis.
//
// A request is admitted only if every cap that applies has room; caps are
// taken in that order and a deny releases those already taken. A deny is a
// Decision with Allowed false, Policy naming the cap, Limit = the cap,
// Remaining = 0 and RetryAfter (100ms unless WithRetryAfter says otherwise);
// transports turn it into RESOURCE_EXHAUSTED / 429. An allow names the cap
// with the least room left (Policy, Limit, Remaining).
//
// # Done
//
// Done releases everything the request took. The transport calls it exactly
// once, by defer, so it runs on return, panic, cancellation and stream end.
// Local releases are prebuilt (one per limiter, one per tracked key entry)
// so Admit+Done allocates nothing on the local path; the price is that a
// second call of a local Done is a caller bug that would release a slot some
// other request holds. A Done that includes fleet slots is a fresh object
// and is idempotent: a second call releases nothing.
//
// # Bounded memory
//
// A per-key cap tracks only keys with requests in flight: an entry is
// created on a key's first request and deleted when its count drops back to
// 0, and deleted entries are recycled; so that a hot key does not delete and
// re-insert its entry on every request, up to 4 entries per shard (256 per
// cap) are kept idle at count 0 instead. At most PerKey.MaxKeys keys
// (default 10 000) are in flight at once per cap; when that many distinct
// keys are in flight, a request for a new key is denied (the cap's Policy,
// RetryAfter, and the error ErrTooManyKeys) rather than admitted untracked:
// so many distinct callers at once is itself overload.
//
// # Fleet caps
//
// A fleet per-key cap keeps, per key, a Redis sorted set of request IDs
// scored by the time their lease expires. Acquiring is one Lua script:
// remove expired IDs, count the rest, add this request's ID with expiry
// now + lease if the count is under the cap. Done removes the ID (ZREM). A
// crashed instance never removes its IDs; they expire after the lease
// (default 30s), so the lease must exceed the longest request (Run renews
// the leases of requests still in flight, every lease/3, for longer ones).
// When Redis cannot answer, the cap acts by its OnError: FailOpen (the
// default, as Stripe advises for limiters) admits without a fleet slot and
// marks the decision SourceFailOpen; FailClosed denies with SourceFailClosed.
// Either way Admit returns the error.
//
// # Adaptive limit (optional)
//
// Adaptive is a separate Admitter, off unless built with NewAdaptive, whose
// cap is learnt from latency (gradient style): it grows while latency stays
// near its long-run level and shrinks when latency rises. Limiter never uses
// it; put it in the chain yourself if you want it.
//
// # Configuration
//
// New takes Options, all named With…; a cap is described by a PerKey or
// FleetPerKey and NewAdaptive by an AdaptiveConfig. These structs follow
// one rule: the zero value of every optional field is its default, written
// in the field's comment, and a bad field is reported by the constructor
// under its name ("concurrency: WithPerKey: PerKey.Cap 0 must be >= 1").
// Every mistake is reported at construction, all at once; none surfaces per
// request.
package concurrency
