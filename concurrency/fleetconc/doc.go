// Package fleetconc is floodgate's fleet-wide concurrency cap: it decides
// whether one more request for a key may start now, given the requests for
// that key already in flight on every instance of the service sharing one
// Redis (for example "at most 20 in flight per user, fleet-wide"). Package
// concurrency caps what is in flight on this instance; a service chains
// the two, local first:
//
//	local, err := concurrency.New(concurrency.WithGlobal(500))
//	fleet, err := fleetconc.New(fleetconc.WithPerKey(fleetconc.PerKey{...}))
//	chain := floodgate.Chain{shed, local, fleet, limits}
//
// The name says what sets it apart: fleet + concurrency. It needs a Redis
// shared by the fleet, so it lives apart from package concurrency, and a
// binary that caps concurrency locally never links go-redis.
//
// # Slots and leases
//
// A fleet per-key cap keeps, per key, a Redis sorted set of request IDs
// scored by the time their lease expires. Acquiring is one Lua script:
// remove expired IDs, count the rest, add this request's ID with expiry
// now + lease if the count is under the cap. Done removes the ID (ZREM).
// A crashed instance never removes its IDs; they expire after the lease
// (default 30s), so the lease must exceed the longest request (Run renews
// the leases of requests still in flight, every lease/3, for longer ones).
//
// A slot is a lease held by one request, not a heartbeat of an instance:
// it outlives no request, and it is freed either by its Done or by its
// lease. So this package does not count instances and does not use
// package fleet's liveness; tying slots to an instance's heartbeat would
// free them a heartbeat TTL after a crash instead of a lease, which is a
// different promise.
//
// When Redis cannot answer, a cap fails open by default (as Stripe
// advises for limiters): it admits without a fleet slot and marks the
// decision SourceFailOpen, naming that cap unless another cap took a
// slot; a cap with PerKey.FailClosed denies with SourceFailClosed. Either way Admit
// returns the error. An acquire that timed out may still run in Redis
// once it answers: its slot is removed in the background (once the
// request is done, when failing open) as soon as Redis has it, so a stall
// leaves no slot that no request holds.
//
// A request whose own context ends (cancelled, or past its deadline)
// before Redis answers is not a Redis failure, and no fail mode applies:
// failing open would admit a request whose caller has gone. It is denied,
// whether the cap fails open or closed, with Source SourceConcurrency,
// Policy naming the cap that was being asked and RetryAfter 0 (no wait
// would admit a request that is gone), and Admit returns an error that
// wraps the context's (errors.Is context.Canceled or
// context.DeadlineExceeded). Slots already taken are removed, and the
// slot whose acquire was cut short is removed in the background as above.
// A context that has already ended is denied without asking Redis. A
// call that fails while the caller's context is live (PerKey.Timeout ran
// out, the connection failed) is Redis failing to answer, and takes the
// cap's fail mode.
//
// # Waiting for a slot
//
// WithWait (a concurrency.Wait: Max, Queue, Order; a Fairness is refused,
// for each key waits in a queue of its own and a per-key cap already
// bounds each caller fleet-wide) lets a request that
// finds a fleet cap full wait up to Max for a slot of that cap and key
// instead of being denied at once. Redis does not tell an instance when
// another frees a slot, so the wait is a local queue in front of the
// fleet check, and polling:
//
//   - The requests waiting on this instance for one key form a queue,
//     ordered as package concurrency orders its own (priority first,
//     unspecified ranking as write, then FIFO or LIFO). Only its head,
//     the request the order picks next, asks Redis; the others wait their
//     turn, so this instance sends at most one acquire per waiting key at
//     a time.
//   - The head asks again 5ms after it became head or last asked,
//     doubling to 50ms between asks, within what is left of Max; and at
//     once when a request on this instance releases a slot of the key
//     (Done, or a deny releasing slots it took), so a slot freed here
//     goes to the request the order picks.
//   - A slot freed by another instance goes to whichever instance's head
//     asks first: the order holds among the requests of one instance,
//     not across the fleet, and such a slot is found up to one poll
//     interval late.
//   - At most Queue requests wait on this instance (all keys); when it is
//     full, a request of a higher priority than the least important one
//     waiting takes that one's place (which is denied at once), any other
//     is denied at once.
//   - A request with several caps waits at each full one in turn, holding
//     the slots it already took, within one Max for all of them.
//   - When the request's context ends while it waits, it is denied as
//     described above for a caller that has gone (RetryAfter 0, the
//     context's error); when Max passes it is denied by the full cap as
//     if it had not waited.
//
// Polls are timed on the WithClock clock when it has an After method (the
// fake clock of package testing/clock), so tests run the wait on fake
// time.
//
// # Decisions and Done
//
// A request is admitted only if every cap whose Key applies has room;
// caps are taken in option order and a deny releases those already taken.
// A deny is a Decision with Allowed false, Policy naming the cap, Limit =
// the cap, Remaining = 0 and the cap's RetryAfter; an allow names the cap
// with the least room left. Done is allocated per request (it carries the
// slots' IDs) and idempotent: a second call releases nothing.
//
// # Imports
//
// fleetconc imports the floodgate core, package concurrency (Wait and
// the defaults it shares), go-redis and floodgate's internal Redis
// plumbing (internal/redisnow); never a transport.
package fleetconc
