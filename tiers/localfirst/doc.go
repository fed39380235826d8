// Package localfirst decides rate-limit buckets locally against a share of a
// fleet-wide budget kept in a store (Redis), so that most requests never
// wait on a round trip: it is a quota.Store that sits in front of the exact
// store and decides each bucket by its quota.Consistency.
//
// # What this package decides
//
// Exact buckets go to the exact store on every request, unchanged (a Take
// of only exact buckets is passed through untouched).
//
// Leased buckets spend units leased earlier from the store's bucket. A
// lease is taken with a request that needs one: the bucket goes to the
// exact store charged the request's cost plus the lease's extra units, in
// the same all-or-nothing Take as the request's other levels, so a lease
// costs no extra round trip. A cold key leases nothing extra (the first
// request is exact); each next lease follows the key's local demand (the
// units it spent per second since the last lease, over WithLeaseTarget,
// or over up to half WithLeaseTTL in proportion to what the store's
// bucket held after the last lease: a key far below its limit leases for
// longer, a key near it for the target), doubling at most at a time, and
// never exceeds the bucket's capacity × WithLeaseShare ÷ live instances. Units not spent within WithLeaseTTL go
// back to the store (a report of minus that many units, see below) in
// the background and on Close; a
// crashed instance's units come back only by the bucket's own refill. Every
// unit spent was first taken from the store, so Leased never admits more
// than the store would; it admits less by what other instances hold unspent.
// A key the store denied is denied here without asking it again: until
// the request's units have refilled (the denial's retry-after), and, for
// a key asked for more than it refills, until the lease its demand wants
// has refilled too, at most WithLeaseTarget longer; the next lease takes
// those units at once. A key held at its limit so costs the store one or
// two takes per lease target instead of one per unit refilled, and its
// denials' retry-after is at most the lease target longer than exact's.
// The wait lets at most capacity × WithLeaseShare ÷ n units gather, so the
// bucket never fills and no refill is lost.
//
// Async buckets are decided on the last known state of the store's bucket.
// Each instance keeps its share of it as a local token bucket of capacity
// C/n refilling at rate/n (n live instances): when the store answers a
// report with its remaining units R, the share is set to
//
//	R / n − unreported
//
// (what this instance admitted since and has not reported), and local
// admits spend it between reports. Refill beyond C/n is lost and spending
// never is, so through a long outage an instance keeps admitting its share
// of the rate, not only its share of the capacity once.
//
// A key new to this instance is decided locally too, from a full share
// (as if its last report had found the store's bucket full), so a key's
// first request costs no round trip and Redis work does not follow the
// number of distinct keys (clients, IPs) an instance meets; the key's
// first report replaces the assumption with the store's state. (A cost
// larger than the share C/n goes to the exact store.) Hits
// are reported to the store per key (a quota.Reporter report of the unreported
// units u, whose reply carries the new R) at a cadence that follows the key's headroom:
// every quarter sync interval I once u reaches half the share s this
// instance had to spend since its last report, else once
//
//	time since the last report × u ≥ I × s / 2
//
// (2 intervals at a quarter of the share, 8 at 1/16), and at least every
// 10 seconds. Redis work then follows the keys near their limits, not
// the number of keys touched. Every report due in one Sync goes to the
// ledger in one call (quota.Reporter; up to 64 keys to a call, which on a
// standalone Redis is one script call): a report is never denied, it
// charges what the store's bucket holds and the rest stays with the
// instance as debt, reported next time. A report is at most the bucket's
// capacity (the rest goes next time); what an instance keeps
// unreported, debt included, is capped at its share of the capacity,
// C/n: beyond that it admitted at its share of the rate while the store
// could not be told, the store's bucket refilled meanwhile, and charging
// it again would make the key pay twice for the same refill. Flush sends
// every unreported hit at once, whatever its cadence (leases are kept),
// to bring the store up to date without stopping the Store.
//
// No report is charged twice. Each report call carries this instance's
// name and a sequence number, and the store records what it did with it
// (quota.ReportRecordTTL). When a call's reply never comes (it timed out:
// Redis paused, a reply lost), its keys wait until the next Sync asks the
// store (Resolve) whether it was applied: if so, what it charged is
// taken as reported; if not, the store records that, so the call is
// refused should it reach Redis later, and its units are sent again.
//
// The bound. Each instance admits at most its share of the state it last
// learned (a full bucket for a key it is new to), so the fleet admits more
// than the limit only when an instance's state is stale: others spent what
// it still counts. In the worst case every other instance learned a full
// bucket and went quiet while one spent it all, so over any window the
// fleet admits at most
//
//	(n − 1) / n × (C + rate × I)
//
// units over the limit (n live instances, C the bucket's capacity, I its
// sync interval), plus what arrives during one report's round trip. The
// first term grows to a whole C, the bound to C + (n − 1) / n × rate × I,
// only when every instance is new to a key whose store bucket others
// emptied (the whole fleet restarted while the key was at its limit):
// each then spends a full share before its first report. (What
// the fleet has admitted beyond the limit is at most what its instances
// hold unreported or as debt: the store's bucket never goes below empty.
// The headroom cadence keeps each instance's unreported units below half
// its share plus a quarter interval of its refill, within that bound.)
// TestAsyncBound scripts that case; with fresh state and even traffic the
// excess is close to 0 (bench/cmd/fleetacc measures it across processes).
// A count of instances below the real one loosens the bound in proportion.
//
// When the store is slow or gone, Leased buckets keep spending their lease
// and then go to the exact store, whose own fallback (package fallback)
// decides (a request that asked for a lease then gets none: the extra
// units the fallback admitted with it are settled back, so the fallback
// charges the store only the request's cost when it answers again); Async buckets keep deciding on their last known state, whose
// refill estimate grows to the capacity ÷ n, so the fleet as a whole keeps
// close to the rule's rate. Reports resume when the store answers: the
// calls that failed are resolved first, and what was not applied is sent
// again, up to the share cap above (a call resolved later than the
// record's TTL, a minute, reads as not applied and may be charged again,
// within that cap). After Redis restarted empty (its records gone with
// it), the first reports drain its full bucket by what the fleet still
// owes.
//
// Mixed takes stay all or nothing. Local units are reserved first; if any
// local bucket denies, nothing else is asked and the reservations are
// cancelled; if the exact store then denies, they are cancelled too.
//
// Waiting and settlement. An async bucket that may wait
// (quota.Bucket.MaxWait) books its share's units ahead: the take is
// allowed with the wait until the share refills them, and later takes
// queue behind it. Leased buckets never book ahead (package tiers refuses
// max_wait on leased rules; a hand-built bucket's MaxWait is dropped).
// Settle (quota.Settler) settles a leased bucket against its lease (a
// refund into the lease, a charge paid from it and the rest charged to
// the store), an async bucket decided here as hits or a credit against
// them (moving the local share by the same amount, so debt is waited out
// locally), and every other bucket by the exact store's Settle.
//
// Each Result's Source says where the bucket was decided: floodgate.
// SourceLease, SourceAsync, or what the exact store reported.
//
// Wrapping. Store.Unwrap returns the exact store, and DecidesConsistency
// says the Store decides Leased and Async buckets: package tiers finds a
// local-first layer through any wrappers above it (package otel's
// instrumented store, package fallback) and refuses leased and async rules
// over a store that has none. New refuses a ledger that cannot take
// report calls: one that is not a quota.Reporter all the way down its
// Unwrap chain (an instrumented Redis store, obs.Store(redisStore), is).
//
// Live instances come from WithInstances (for example (*fleet.Members).Count
// from package fleet, which counts heartbeats in Redis); the default is 1.
package localfirst
