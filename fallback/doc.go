// Package fallback keeps rate limiting deciding when its store cannot: a
// quota.Store that calls a primary store (usually Redis, package
// tiers/redisstore) under a github.com/sony/gobreaker/v2 circuit breaker and
// a per-call timeout, and decides locally, rule by rule, when the primary is
// slow, failing or tripped. It wraps the rate-limit stage's store, not a
// request: it is not an interceptor and has no place of its own in the
// chain (fallback.New(redisStore, fallback.WithInstances(members.Count))
// goes to tiers.NewLimiter, or to localfirst.New as its exact store;
// package guard builds all of it). Store.Unwrap returns the primary, so
// the capability checks of packages quota and tiers see through a Store
// to what it guards: a Store over a store that cannot settle cannot
// either (CanSettle), and one over an instrumented Redis store
// (fallback.New(obs.Store(redisStore))) settles as over the store itself.
//
// # What this package decides
//
// When a call fails. Each Take gets a budget (WithTimeout, default 5ms; a
// Take with a rule whose on_store_error is "closed" gets WithClosedTimeout,
// default 250ms, since such a rule would deny rather than decide locally).
// WithTimeout's budget is a floor: on a host so loaded that the store's
// healthy answers take longer, the budget follows their latency (the
// smoothed latency plus four times its variation, as TCP's retransmission
// timer, RFC 6298), up to the closed budget, so a call answered in the
// store's usual time is not decided locally; it comes back to the floor
// as the answers speed up (Stats.Budget).
// A deny is a success (the store answered). An error from the primary is a
// failure. The budget running out is a failure only when the primary has
// answered nothing for WithSlowGrace (default 1s; a store not heard from
// yet gets the grace from New, so the first calls of a process on a busy
// host do not count): until then the store is
// busy, not down, so the call is decided by on_store_error but counted as
// slow (Stats.Slow) and not against the breaker. A healthy but loaded
// Redis, or one paused for tens of milliseconds, therefore never opens the
// breaker; a dead one (connections refused or reset) opens it at once, and
// a silent one after the grace. Every failure and slow call is counted by
// its cause (Stats.Causes: timeout, refused, reset, noscript, oom,
// redirect, other) and logged with it. A call abandoned because the caller's
// own context ended is neither: the caller left, which says nothing about
// the store, so the breaker does not count it and Take returns the
// context's error. Bad arguments (an empty or repeated key, an invalid
// Limit, a negative cost, an unknown OnStoreError, res shorter than
// buckets) are returned as errors and never counted against the store:
// they are checked when the primary fails (a failure they explain is the
// caller's error, excluded from the breaker's counts) and before any
// decision without the primary, not on the healthy path, where the primary
// checks them itself.
//
// The primary must honour the context deadline it is given: the timeout is
// enforced by the context, not by abandoning a goroutine (which would leave
// the primary writing into res after Take returned). The call's context
// carries the caller's values and the earlier of the caller's deadline and
// the budget, but not the caller's cancellation, which the budget bounds
// anyway; the budget starts when the primary first consults the context.
// A go-redis client honours deadlines only with
// redis.Options.ContextTimeoutEnabled set (otherwise it waits for its own
// ReadTimeout). Also set DialerRetries to 1, so a dead server fails the call
// at once and the breaker, not the pool, decides when to try again; and note
// that go-redis stops dialing altogether once PoolSize dials have failed,
// until a background dial (every second) succeeds, which can delay recovery
// by up to a second after a long outage.
//
// When the breaker trips. After WithFailures (default 5) consecutive
// failures the breaker opens and every Take is decided without the primary
// for WithOpenInterval (default 1s). Then it is half-open: WithProbes calls
// (default 1) go to the primary while every other call keeps falling back,
// so a recovering Redis is not hit by the whole fleet's traffic at once.
// A store that has just come back (a restarted Redis, a loaded host) may
// answer slowly at first, which a few-millisecond budget would mistake for
// another failure and hold the breaker open for another interval; so the
// breaker hears a probe's outcome whenever it comes (within four closed
// budgets; later, the probe counts as failed), while the request that
// carries it waits no more than a healthy
// call would: a probe of a take with local buckets (its rules'
// on_store_error local) waits the call budget, and is decided locally if
// the store has not answered by then; the store's answer, when it comes,
// is the probe's outcome (and is matched with the local decision, as any
// late answer), and until it comes no other take is sent. This needs a
// primary that answers abandoned takes late (the Redis store with
// batching, its default); with any other, and for a take with a rule
// that fails closed, the probe waits up to WithClosedTimeout (default
// 250ms). When the probes all succeed the breaker closes; a failed probe
// opens it for another interval.
//
// What a request waits for the store, by the breaker's state: closed, the
// call budget (WithTimeout, adaptive up to WithClosedTimeout; a take with a
// fail-closed rule, WithClosedTimeout); open, nothing (decided at once);
// half-open, the call budget as when closed, the probe included, except as
// said above. A take the local limiters deny while a call it sent is late
// may wait for that call's answer up to the closed budget (an admit never
// waits), and no longer than the closed budget after the store's last
// answer of any call (a store silent that long is stalled: from then on a
// deny is decided at once); a probe's never waits. Time a request waits on
// a failing store is added to its wait counter, which the adaptive
// shedder takes out of its latency sample (package shedder): a stalled
// store is not an overloaded service. gobreaker measures the interval on the system clock;
// WithClock only drives the local limiters. Every transition is logged with
// log/slog (Warn when opening, Info otherwise, naming the last store error)
// and passed to the WithOnStateChange callback, which telemetry (package otel)
// can export.
//
// The healthy path costs tens of nanoseconds and no allocation: call
// contexts are pooled, and while the breaker is closed with no failure
// since the last success a call skips gobreaker's bookkeeping (a success
// then cannot change its decision, which depends on consecutive failures
// only); any failure goes through gobreaker and the next calls take the full
// path until one succeeds.
//
// What each rule does meanwhile, by its Bucket.OnStoreError, is decided by
// quota.DecideUnavailable, the one place where fail modes are applied; this
// package supplies the local limiters:
//
//   - quota.FailLocal (the default) decides with a golang.org/x/time/rate
//     limiter per bucket, read at the injected clock's time. Its rate is the
//     bucket's Rate ÷ Period ÷ instances per second and its burst the
//     bucket's capacity (Burst for token bucket and GCRA, Rate for the window
//     algorithms) ÷ instances, rounded down, at least 1. A limiter starts
//     from what the primary last answered for the key, not full: the
//     remaining units then, refilled at the bucket's rate since, capped at
//     the capacity, ÷ instances, less what this instance admitted locally
//     and has not charged to the primary yet (see Charging), unrounded (a
//     fraction of a unit is kept, so n instances seeded from one answer
//     hold exactly what the store had). A key the primary never answered
//     for starts from the capacity ÷ instances. A limiter that decided
//     before, and whose key the primary has answered for since, starts
//     again from that answer. So one slow call, or the first calls of an
//     outage, cannot hand a key that was at its limit a fresh bucket. The window
//     algorithms are approximated by this token bucket, which can admit up
//     to twice the window's share across one window; the store's exact
//     window comes back with the store. The Result reports the local burst
//     as Limit. A cost above the local burst but within the rule's capacity
//     is denied with quota.StoreErrorRetryAfter (only the store can admit
//     it).
//   - quota.FailOpen allows and charges nothing; its Result reports the
//     rule's capacity as Limit and capacity − cost as Remaining.
//   - quota.FailClosed denies with RetryAfter (and Reset)
//     quota.StoreErrorRetryAfter.
//
// Whatever the mode, a cost above the rule's capacity is denied with
// RetryAfter quota.Never, as every store denies it.
//
// Mixed buckets in one Take stay all or nothing: the Take is allowed only if
// every bucket allows. A FailClosed bucket (or an impossible cost) denies the
// whole Take and no local limiter is charged; FailOpen buckets never stand in
// the way. The FailLocal buckets are decided together under one lock: each
// reserves its cost at the same instant with ReserveN, and if any of them
// cannot proceed now, or another bucket denied, every reservation is
// cancelled, so a denied Take consumes nothing anywhere, exactly. Each
// Result's Source names what decided that bucket
// (floodgate.SourceLocalFallback, SourceFailOpen or SourceFailClosed);
// results the primary produced keep the primary's Source, so the Observer
// and the transports can tell degraded decisions apart.
//
// Charging. Every unit admitted locally under quota.FailLocal (a call
// slower than its budget while the primary answers others, a failed
// call, an open breaker) is charged to the primary once it answers, on
// the path package tiers/localfirst's async consistency already uses for
// the units its instances admit on their own: quota.Reporter report
// calls, each named by this Store's instance (random) and a sequence
// number, recorded by the store. The primary is the ledger, as it is for
// localfirst: there is one ledger and one way to charge it after the
// fact, so a unit admitted locally and reported reads in Redis exactly as
// one localfirst reported, and a report whose reply was lost (Redis
// paused mid-call) is resolved (quota.Reporter.Resolve) before anything
// is sent again, never charged twice. The bookkeeping lives here, beside
// the local limiters that admitted the units, rather than being handed to
// a localfirst Store above: a fallback Store is often used without one
// (tiers.NewLimiter(fallback.New(redisStore))), and a Store knows which
// of its own decisions were local. It finds the ledger beneath it with
// quota.Layers: the primary, and every store beneath it, must be a
// quota.Reporter (redisstore, memstore and package otel's wrapper of
// either are). Over a primary that is not, New logs a warning and
// ChargesLocal reports false: the fallback still decides, its local
// admits are never charged (as a Limiter warns of a "local" rule over a
// store with no fallback, rather than refusing it).
//
// What one instance owes a key is capped at its share of the capacity,
// s = C/n (at least 1), as async's unreported units and debts are:
// beyond it this instance admitted at its share of the rate while the
// store could not be told, the store's bucket refilled meanwhile, and
// charging more would make the key pay twice for that refill. A report
// charges what the store's bucket holds; the rest is debt, owed again
// (within the cap) and reported with the next. A Settle of a bucket
// decided locally moves what is owed by the same amount. The reports go
// out in the background, at most one Sync at a time, started by the first
// Take the primary answers while something is owed (the healthy path
// reads one atomic word for it); Sync sends them at once. Owed units of
// at most WithLocalCapacity keys are kept; units of further keys are
// counted (Stats.ChargeDropped), not charged. Stats counts what was
// charged (Charged, Debt, GivenBack, ReportFailures, Owed, ChargeExpired).
//
// A window algorithm's units are charged to the window they were
// admitted in, not to the one current when the store answers. They are
// owed by window (of the admission time on the WithClock clock; a
// calendar window, quota.Bucket.Span, by the Span its take carried, over
// once it has ended), at most two windows a key (the current one and the one before; older ones no
// longer count for any window algorithm), each capped at twice the share
// (what a local limiter admits in one window: its burst and its refill
// over the window), and reported with the time of the window's last
// local admission (quota.Bucket.Admitted). The store charges them whole
// to that window while it counts (a fixed window's current window; a
// sliding counter's current or previous one, the latter weighted; a
// log's last period, as timestamps at that time), beyond the limit if
// need be (nothing is owed again: the window itself carries the excess),
// and charges nothing once it is over: those units are counted
// (Stats.ChargeExpired), since charging a window that no longer counts
// cannot matter. A log's units of one window are recorded at the last
// admission's time, so they may count up to one period longer than the
// requests did: fewer admitted afterwards, never more. The store decides
// on its own time (Redis TIME, unless it has a clock), so this Store's
// clock and the store's must agree to well within a window (hosts kept
// by NTP, windows of a second or more): a skew of d moves the units
// admitted within d of a window's end into the neighbouring window.
//
// Late answers. A take that ran out of its budget was sent, and the store
// usually applies it later (a paused Redis runs the commands queued on its
// sockets when it resumes; a loaded one answers late): charged by the store
// as it decides it, whatever was decided locally meanwhile. So a take with
// local buckets is matched with its answer in one of two ways. Over a
// primary that answers late itself (a layer with an AnswersLate() bool
// method reporting true: tiers/redisstore with batching, its default, on a
// standalone, Sentinel-managed or Cluster Redis), every call runs as on the
// healthy path, and its context carries a receiver of late answers (the
// contract is package internal/lateanswer's) that the primary hands the
// answer of a call abandoned after it was sent: a call never costs more
// until it runs out of its budget, and every one that does is matched,
// the first of a stall as much as the last. Over any other
// primary that takes reports and has a backend to be late with (no layer of
// it answers for its own failures: memstore, which has no backend, never is
// late), a take with local buckets does not abandon its call while the
// store is slow (from New, and for 10s after any call ran out of its
// budget): the call runs in the background, for the closed budget or the
// slow grace, whichever is longer, and the caller waits its own budget for
// it; there, the first call of a stall that begins after a fast period is
// abandoned, its outcome unknown (at most one unit per instance and stall
// may be charged twice). When the answer comes after the local decision,
// the two are matched: a local admit the store also allowed is paid for
// (not reported again); a take denied locally that the store allowed had
// its units charged without being admitted, and they are given back by a
// report of a negative charge (the same recorded calls). And a take the
// local limiters deny waits for the store's answer up to the closed budget
// from its start, while the store has answered within the closed budget:
// a short stall then costs denied requests some latency,
// not the requests themselves, while a local admit never waits. The healthy
// path never runs a call in the background (a store fast for 10s leaves the
// mode); at most 256 calls of one Store run so at a time, and the rest as
// on the healthy path, their outcome unknown. A primary that answers late
// needs neither the mode nor its cap. Stats counts the late answers (Late,
// LateApplied, LateAnswered).
//
// The bound. Let n be the live instances, C a bucket's capacity, r its
// rate (units per second), s = C/n the local share, and T the length of a
// slow period (every call of the period decided locally). Instance i last
// heard from the store that R_i units were left, a_i before the period
// began. During the period the fleet admits locally at most
//
//	Σ_i min(C, R_i + r·a_i) / n + r·T  ≤  n·s + r·T  =  C + r·T
//
// units (each instance starts from its seed and refills at r/n), where
// the store itself would have admitted R + r·T (R: what it held when the
// period began). The excess is at most Σ_i min(C, R_i + r·a_i)/n − R ≤ C
// − R: it comes only from stale views (units others spent after instance
// i last heard), and is 0 when every instance's last answer is current.
// When the store answers, every unit admitted locally is charged, up to s
// per instance per key, so a period in which no instance admits more than
// s locally (r·T ≤ C for a key at its limit) leaves the store charged for
// all of it: the excess is then paid back from the bucket's refill, and
// over any window that covers the period and the next report the fleet
// stays within the limit plus the units above the caps (at most r·T).
// TestStallBound holds the bound on a fake clock.
//
// The window algorithms (L units per window of length W, so C = L and
// r·W = L) are decided locally by the same token bucket of share s, so in
// any one window the fleet admits locally at most Σ_i min(C, R_i +
// r·a_i)/n + r·min(T, W) ≤ 2L, the price of the approximation (a fixed
// window's own price across a boundary). What the store counts
// afterwards depends on which windows still count when it answers, since
// each unit is charged to its own window, up to 2s per instance and
// window. A fixed window current when the store answers ends counting
// every unit admitted in it, by the store or locally, and admits nothing
// more once that reaches L; a window the period covered to its end is
// over, and what it admitted beyond L is not paid back (a fixed window
// forgets). A sliding window counter's current and previous windows are
// charged, so an excess of the previous window is paid back weighted, as
// its arithmetic carries any count. A log's charged units count until
// they age out, so an excess within the last period is paid back in
// full. TestLocalWindowAdmitsAreCharged and
// TestLocalWindowAdmitsAcrossABoundary hold the charging on a real Redis
// and a fake clock.
//
// Replicas. The number of instances sharing a quota comes from
// WithInstances (default 1), read on every local decision: pass
// (*fleet.Members).Count, which counts heartbeats in Redis and keeps the
// last count through an outage (so a fleet that was 4 before Redis went
// away keeps sharing by 4), or a constant for a static replica count. A
// limiter whose count changes is reshaped, keeping its consumption.
//
// Bounds. Local limiters live in an LRU bounded by WithLocalCapacity
// (default 10,000 buckets). Creating a limiter when the LRU is full evicts
// the least recently used one; an evicted bucket that returns starts with a
// full local burst, so a capacity smaller than the set of active keys
// loosens the local limits. Stats counts evictions. A rule whose limit
// changes keeps its limiter and its consumption, adjusted to the new share.
//
// Waiting and settlement. A local limiter books the units of a bucket
// that may wait (quota.Bucket.MaxWait) as the stores do, with
// x/time/rate's reservations: the take is allowed with the reservation's
// delay as Result.Wait, and a later take queues behind it. Settle
// (quota.Settler) settles each bucket where its charge was made, by the
// Source its take reported: on its local limiter (debt below 0 tokens, a
// refund capped at the local burst), by the primary's Settle (not while
// the breaker is open, never retried, never counted against the breaker),
// or not at all for fail-open and fail-closed buckets, which charged
// nothing. Stats counts settlements by outcome.
//
// Shutdown. The units a Store admitted locally are owed to the primary
// until a Sync charges them, and a process that exits owing them leaves
// the fleet over-admitted. Call Close(ctx) at shutdown, with a bounded
// context (a couple of seconds): it stops the background work (the
// background Sync and the calls running late), then hands over what is
// owed as Sync does, and returns an error naming what it could not hand
// over (units and keys still owed, unresolved report calls) and why.
// Close is idempotent and does not close the primary: close, in this
// order, a localfirst Store built on this one, then this Store, then the
// primary, then its Redis client. package otel's wrapper forwards it: its
// Close() error closes a Store it wraps, with a background context
// (bounded by the Store's own timeouts). Take keeps deciding after
// Close, with nothing running in the background.
//
// Nothing is silent. Stats counts calls, failures, timeouts, calls the
// breaker rejected, transitions, and every bucket decided without the
// primary by mode and outcome, in total (Stats.Fallback) and by the
// bucket's rule (Stats.ByRule, bounded at 1024 rules). Store failures are
// logged at most once a second with the count suppressed in between. The
// Observer sees each decision's binding rule and source as well.
package fallback
