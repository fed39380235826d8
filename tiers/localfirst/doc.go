// Package localfirst decides rate-limit buckets locally against a share of a
// fleet-wide budget kept in a store (Redis), so that most requests never
// wait on a round trip: it is a tiers.Store that sits in front of the exact
// store and decides each bucket by its tiers.Consistency.
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
// units it spent per second since the last lease, over WithLeaseTarget),
// doubling at most at a time, and never exceeds the bucket's capacity ×
// WithLeaseShare ÷ live instances. Units not spent within WithLeaseTTL go
// back to the store (Ledger.Refund) in the background and on Close; a
// crashed instance's units come back only by the bucket's own refill. Every
// unit spent was first taken from the store, so Leased never admits more
// than the store would; it admits less by what other instances hold unspent.
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
// A cold key is decided by the exact store once, which also gives R. Hits
// are reported to the store per key (a Take of the unreported units, which
// returns the new R) every sync interval of its rule, more often for keys
// near their share and less often, up to every 8 intervals, for keys far
// below it. A report the store denies (other instances over-admitted)
// charges what is left and keeps the rest as debt, reported next time.
//
// The bound. Each instance admits at most its share of the state it last
// learned, so the fleet admits more than the limit only when an instance's
// state is stale: others spent what it still counts. In the worst case
// every other instance learned a full bucket and went quiet while one
// spent it all, so over any window the fleet admits at most
//
//	(n − 1) / n × (C + rate × I)
//
// units over the limit (n live instances, C the bucket's capacity, I its
// sync interval), plus what arrives during one report's round trip.
// TestAsyncBound scripts that case; with fresh state and even traffic the
// excess is close to 0 (bench/cmd/fleetacc measures it across processes).
// A count of instances below the real one loosens the bound in proportion.
//
// When the store is slow or gone, Leased buckets keep spending their lease
// and then go to the exact store, whose own fallback (package fallback)
// decides; Async buckets keep deciding on their last known state, whose
// refill estimate grows to the capacity ÷ n, so the fleet as a whole keeps
// close to the rule's rate. Reports resume when the store answers; a report
// that failed is counted as not applied and sent again (a timed-out report
// that did reach the store is then charged twice: the safe side).
//
// Mixed takes stay all or nothing. Local units are reserved first; if any
// local bucket denies, nothing else is asked and the reservations are
// cancelled; if the exact store then denies, they are cancelled too.
//
// Each Result's Source says where the bucket was decided: floodgate.
// SourceLease, SourceAsync, or what the exact store reported.
//
// Live instances come from WithInstances (for example (*fleet.Members).Count
// from package fleet, which counts heartbeats in Redis); the default is 1.
package localfirst
