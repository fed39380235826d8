// Package concurrency is floodgate's in-flight limiter: it decides whether
// one more request may start now, given the requests already in flight that
// it admitted and whose Done has not been called, per instance, per key on
// this instance (the fleet-wide per-key cap, kept in Redis, is package
// concurrency/fleetconc's).
//
// A Limiter holds any combination of
//
//   - a global cap (WithGlobal): requests in flight on this instance;
//   - per-key caps (WithPerKey): requests in flight on this instance per
//     key, the key computed from the Request by a function (for example
//     "20 in flight per user on /search.v1.Search/Query").
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
// other request holds.
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
// A per-key cap across every instance sharing one Redis is package
// concurrency/fleetconc's, a stage of its own chained after this one
// (floodgate.Chain{local, fleet}): a fleet deny then releases this
// Limiter's slots as ignored, as the Chain does for every earlier stage.
//
// # Waiting for a slot
//
// By default a full cap denies at once. WithWait (for a Limiter) and
// AdaptiveConfig.Wait (for Adaptive) let a request wait up to Wait.Max
// for a slot instead, as Netflix concurrency-limits' blocking limiter
// does:
//
//   - A freed slot goes to the waiting request of the highest priority
//     (critical, write, read, test; unspecified ranks as write, the
//     shedder's default), and among those of one priority to the oldest
//     (FIFO, the default) or the newest (LIFO). It is handed over when the
//     slot is released, so a request arriving meanwhile does not take it:
//     while requests wait, a new one joins them.
//   - Under a Limiter's per-key caps a freed slot goes to the first
//     waiting request in that order that every cap now admits: one
//     waiting for a key that is still full does not hold up one whose key
//     has room.
//   - At most Wait.Queue requests wait (DefaultQueue). When the queue is
//     full, a request of a higher priority than the least important one
//     waiting takes the place of the one a slot would reach last (the
//     newest of that priority under FIFO, the oldest under LIFO), which is
//     denied at once; any other request is denied at once.
//   - With Wait.Fairness (floodgate.Fairness), a freed slot goes, among
//     the waiting requests of one priority, to the one whose caller (the
//     tenant, user, API key or IP it names) holds the fewest slots for its
//     weight, FIFO or LIFO among equals; and a full queue refuses the
//     waiting request of the lowest priority whose caller holds the most:
//     one caller's surge waits behind the others' requests, and is the one
//     refused. It costs a look at every waiting request of a priority per
//     freed slot, and a sharded lock per admitted request.
//   - When Max passes the request is denied as it would have been without
//     waiting (same Policy, Limit, RetryAfter, no error). When its context
//     ends first it is denied with RetryAfter 0 and an error wrapping the
//     context's, and its place in the queue is free again. A slot handed
//     over just as the context ended is released (OutcomeIgnored).
//   - A request whose context has a deadline is refused at once (as when
//     the queue is full: the deny it would have had without waiting, no
//     error) when the queue's pace would hand it a slot and let it run
//     past that deadline: one slot for each request a freed slot reaches
//     before it and one for it, each after the mean interval between
//     slots freed while requests waited, then the mean time a request
//     from the queue held its slot. It would only have held a place and,
//     once handed a slot, done work nobody reads. Until the pace is
//     measured (the queue's first slots after it was empty), every
//     request waits.
//   - Waits are timed on the Clock (WithClock, AdaptiveConfig.Clock): one
//     with an After method, as package testing/clock's fake has, times
//     them itself, so tests run on fake time.
//
// FIFO is fair, but under sustained overload every request that runs has
// waited about Max. LIFO serves the newest first: those that run waited
// little, and the ones left waiting longest are the ones denied when Max
// passes, so latency stays low under overload. CoDel is FIFO until the
// queue has not emptied for Wait.Interval (100ms), then LIFO with every
// new wait cut to Wait.Target (5ms) until it empties: a burst is served
// in order, a standing queue as LIFO with little waiting. Offered 3x its
// capacity with 100ms deadlines (bench/cmd/deadline), a service behind a
// FIFO queue that ignored deadlines answered none of its calls in time;
// with CoDel it answered 96% of its capacity in time (LIFO: 97%). BenchmarkWaitOverload
// measures the p99 of both against denying at once; bench/README.md has
// the figures and the command.
//
// A waiting request costs a goroutine (its own, blocked in Admit) and one
// small allocation; a release takes a mutex only while requests wait. The
// fleet-wide caps of package concurrency/fleetconc wait too (polling
// Redis); see its documentation.
//
// # Adaptive limit
//
// Adaptive is an in-flight cap that needs no hand-tuned number: it learns
// the limit from the latency and the outcome of the requests it admits, in
// the manner of Netflix's concurrency-limits. It is an Admitter of its own
// (NewAdaptive); put it in the chain after the shedder, beside or instead
// of a Limiter's global cap:
//
//	adaptive, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{Min: 8, Max: 512})
//	chain := floodgate.Chain{shed, adaptive, limits}
//
// A request is admitted while fewer than Limit() requests are in flight.
// What each admitted request reports to Done decides what is learnt from
// it (floodgate.Result.Outcome, filled by package interceptor):
//
//   - OutcomeSuccess: its latency (Admit to Done, on the Clock) is a sample.
//   - OutcomeDropped (its deadline passed, or the handler answered
//     RESOURCE_EXHAUSTED, UNAVAILABLE, 429, 503, 504): a drop; the window
//     it ends in multiplies the limit by Backoff (0.9), whatever the
//     latencies say, because a request dropped fast would otherwise look
//     like a healthy sample.
//   - OutcomeFailed: no sample. An error that says nothing of load often
//     returns much faster (or slower) than real work, and would move the
//     limit for the wrong reason.
//   - OutcomeIgnored: no sample. A floodgate.Chain reports it when a later
//     stage (a rate limit) denies a request this one admitted, which took
//     no time at all and must never count as a fast sample; so do a client
//     cancellation and a handler panic.
//
// Samples are collected in windows: a window closes at the first Done at
// least Window (1s) after it opened that has MinSamples (10) samples, or
// any drop. Its latency is the Percentile (the median unless set) of its
// samples, nearest rank, kept in a reservoir of at most MaxSamples, so one
// very slow request does not move the limit the way a mean would. With rtt
// that percentile and inflight the most requests in flight during the
// window, each algorithm moves the limit (est, a real number; Limit is its
// floor) once per window, and the result is clamped to [Min, Max]:
//
// Gradient2 (default):
//
//	drop in window: est = est * Backoff
//	long = rtt on the first window, or when rtt < long/2 (the overload passed)
//	long = long + (rtt - long) / LongWindow      otherwise
//	inflight < est/2: unchanged                   (not limited by concurrency)
//	gradient = clamp(Tolerance * long / rtt, 0.5, 1)
//	est = est*(1-Smoothing) + (est*gradient + sqrt(est))*Smoothing
//
// Vegas:
//
//	drop in window: est = est * Backoff
//	noload = rtt on the first window, when rtt < noload, and every
//	         ProbeEvery windows (unchanged est on those windows)
//	inflight < est/2: unchanged
//	queue = ceil(est * (1 - noload/rtt)); lg = max(1, log10(est))
//	queue <= lg: est += Beta*lg;  queue < Alpha*lg: est += lg
//	queue > Beta*lg: est -= lg;   otherwise unchanged
//
// AIMD:
//
//	drop in window, or Timeout > 0 and rtt > Timeout: est = est * Backoff
//	inflight >= est/2: est = est + 1
//
// Adaptive knows no priorities: it refuses a critical request like any
// other once the limit is reached, so put the shedder before it, and set
// AdaptiveConfig.Bypass (floodgate.PriorityCritical) to admit the
// priorities it must never refuse, still counted and timed.
//
// Gradient2 follows a service whose latency drifts; Vegas holds a short
// queue over a latency floor it measured (start it below the real
// capacity: a floor measured under load hides the queue); AIMD needs drops
// or a Timeout to find the limit and then saw-tooths under it.
//
// Reconfigure changes every setting at run time (a policy reload, see
// package policyfile) except the Clock, the Wait included, keeping the limit learnt so far
// clamped to the new [Min, Max]; Limiter.SetGlobal does the same for a
// Limiter's global cap, and Limiter.SetPerKey for one of its per-key caps
// (its Cap, Key and MaxKeys; a cap is added by New only). The policy
// file's concurrency: section carries these settings (adaptive:, global:,
// per_key:) and policyfile.Watch applies them on every reload.
//
// # Configuration
//
// New takes Options, all named With…; a cap is described by a PerKey and
// NewAdaptive by an AdaptiveConfig. These structs follow one rule: the
// zero value of every optional field is its default, written in the
// field's comment, and a bad field is reported by the constructor under
// its name ("concurrency: WithPerKey: PerKey.Cap 0 must be >= 1"; an
// AdaptiveConfig's fields by their policy file keys, "concurrency:
// NewAdaptive: max: 5 must be >= min 10").
// Every mistake is reported at construction, all at once; none surfaces per
// request.
//
// # Imports
//
// This package imports the floodgate core and the standard library only:
// it never links go-redis, so a binary that caps concurrency on this
// instance alone carries no Redis client.
package concurrency
