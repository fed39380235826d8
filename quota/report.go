package quota

import (
	"context"
	"fmt"
	"time"
)

// ReportResult is what a Reporter did with one bucket of a report call.
type ReportResult struct {
	// Applied: the bucket was charged (false: its call failed, or was
	// refused as resolved already, and nothing changed).
	Applied bool
	// Charged is what was charged of the bucket's Cost: all of it, or as
	// many units as the bucket held. Cost − Charged is debt, for the
	// caller to report again later. A negative Cost (units given back) is
	// always applied whole: Charged = Cost.
	//
	// A window algorithm's bucket is charged all of its Cost when the
	// window that holds Bucket.Admitted still counts, and nothing when it
	// is over: Cost − Charged is then not debt (charging a window that no
	// longer counts cannot matter), and nothing is owed again. Of a
	// negative Cost it gives back at most what that window counted:
	// Charged is between Cost and 0.
	Charged int64
	// Remaining is what the bucket has left after the charge (Report
	// only; Resolve leaves it 0).
	Remaining int64
}

// Reporter is a store that takes report calls: units that instances
// admitted on their own (package tiers/localfirst's async shares) charged
// to its buckets, each call named by its instance and a sequence number
// so that a call whose reply never came can be resolved instead of sent
// again blindly. Package tiers/localfirst needs it of its ledger; memstore
// and redisstore implement it.
//
// Report charges every token bucket and GCRA bucket up to its Cost, each
// on its own (a report never denies: it charges as many units as the bucket holds, the floor
// of a token bucket's tokens or of a GCRA's remaining units; an absent
// bucket is full); a negative Cost gives -Cost units back as a Settle of
// that negative Cost does (capped at the capacity; an absent bucket stays
// full). That is the ledger's path, not a second way for callers to give
// units back (Settler.Settle is the one): package tiers/localfirst returns
// unspent leases through the same recorded calls as its charges, so a
// give-back whose reply was lost is resolved, never applied twice. It
// records the call (instance, seq) with what it could not charge, for
// ReportRecordTTL. A call that Resolve has resolved
// as not applied is refused whole (Applied false everywhere): it reached
// the store too late.
//
// Resolve, given a call that failed (with the same instance, seq and
// buckets, in the same order), says per bucket whether the call was
// applied and, if so, what it charged (res); a call not applied is then
// recorded as resolved, so it never will be. Every bucket's result is
// filled either way.
//
// A window algorithm's units are charged to the window they were admitted
// in, named by Bucket.Admitted (a time on the reporter's clock; a time
// after the store's now is taken as now), not to the window current when
// the report arrives; a window that no longer counts is charged nothing.
// A report into a window that counts never denies: like a settlement's
// charge, it may leave more counted than the limit, debt that the rest of
// the window waits out (the sliding counter carries it, weighted, into the
// next window; the log until the units age out). With the arithmetic of
// the Algorithm doc, a = the admitted time in µs, a = min(a, now), u = the
// Cost, and the state read as a take reads it at now:
//
//	FixedWindow:          floor(a / W) == w: count = max(0, count + u)
//	  with a Span [s, z): now < z and no later window stored (win <= s):
//	                      count = max(0, count + u) (win = s; TTL max(1, z - now))
//	SlidingWindowCounter: floor(a / W) == w:     curr = max(0, curr + u)
//	                      floor(a / W) == w - 1: prev = max(0, prev + u)
//	SlidingWindowLog:     a > now - W: u > 0: record u timestamps equal to a
//	                                   u < 0: drop the -u newest timestamps t <= a
//	otherwise:            nothing (the window is over)
//
// A give-back of a window that counts nothing changes nothing (an absent
// state stays absent); a charge of an absent state starts it as a take
// would. Charged is the change of the count; Remaining is what a take of
// cost 0 would report after the call. The state's TTL becomes what a take
// leaving that state would set.
//
// Time. Every bucket is decided at the store's now: a store with an
// injected clock reads it, a Redis store without one reads Redis TIME.
// Admitted is on the reporter's clock, so the two must agree to well
// within a window: a skew of d moves units admitted within d of a window's
// boundary into the neighbouring window (charged there, or nothing if that
// window is over), and a log's timestamps by d. Hosts kept by NTP (skews
// of milliseconds) and windows of a second or more make that a rounding.
//
// A store that partitions keys (a Redis Cluster) runs one atomic call per
// partition, each recorded on its own, and fills the results of the
// partitions that succeeded when others fail. Bad input (what ValidateReport
// refuses) is refused before anything is charged.
type Reporter interface {
	Store
	Report(ctx context.Context, instance, seq uint64, buckets []Bucket, res []ReportResult) error
	Resolve(ctx context.Context, instance, seq uint64, buckets []Bucket, res []ReportResult) error
}

// ValidateReport reports the first thing wrong with the arguments of a
// Reporter's Report or Resolve, or nil: instance 0; res shorter than
// buckets; a bucket with no key, the key of an earlier bucket, a limit
// that does not validate, a Cost beyond ±2^53, an Admitted time missing
// on a window algorithm's bucket or set on a TokenBucket or GCRA one, or
// one before the Unix epoch or beyond 2^53 µs after it; a Span that a
// take would refuse, or that does not hold the Admitted time (a calendar
// window's report names the window its units were admitted in).
func ValidateReport(instance uint64, buckets []Bucket, res []ReportResult) error {
	if instance == 0 {
		return fmt.Errorf("quota: report instance is 0")
	}
	if len(res) < len(buckets) {
		return fmt.Errorf("quota: res has room for %d results, want one per bucket (%d)", len(res), len(buckets))
	}
	for i := range buckets {
		b := &buckets[i]
		switch {
		case b.Key == "":
			return bucketError(i, b, errSettleEmptyKey)
		case b.Cost > MaxSettle || b.Cost < -MaxSettle:
			return bucketError(i, b, fmt.Errorf("report of %d units is out of range [-2^53, 2^53]", b.Cost))
		}
		for j := range i {
			if buckets[j].Key == b.Key {
				return bucketError(i, b, fmt.Errorf("same key as bucket %d", j))
			}
		}
		if err := b.Limit.Validate(); err != nil {
			return bucketError(i, b, err)
		}
		switch at := b.Admitted; {
		case b.Limit.Algorithm.CanBookAhead() && !at.IsZero():
			return bucketError(i, b, fmt.Errorf("%s is charged at the store's now: Admitted (%s) is for the window algorithms' reports", b.Limit.Algorithm, at.UTC().Format(time.RFC3339Nano)))
		case b.Limit.Algorithm.CanBookAhead():
		case at.IsZero():
			return bucketError(i, b, fmt.Errorf("a report of %s needs Admitted, the time its units were admitted (their window)", b.Limit.Algorithm))
		case at.UnixMicro() < 0 || at.UnixMicro() > MaxSettle:
			return bucketError(i, b, fmt.Errorf("admitted time %s is out of range [1970-01-01, 2^53 µs after it]", at.UTC().Format(time.RFC3339Nano)))
		}
		if sp := b.Span; !sp.IsZero() {
			one := []Bucket{{Limit: b.Limit, Span: sp}}
			if err := checkPartialSpan(one, 0); err != nil {
				return bucketError(i, b, err)
			}
			if b.Admitted.Before(sp.Start) || !b.Admitted.Before(sp.End) {
				return bucketError(i, b, fmt.Errorf("admitted time %s is outside its Span [%s, %s)", b.Admitted.UTC().Format(time.RFC3339Nano),
					sp.Start.UTC().Format(time.RFC3339Nano), sp.End.UTC().Format(time.RFC3339Nano)))
			}
		}
	}
	return nil
}
