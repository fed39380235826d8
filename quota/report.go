package quota

import (
	"context"
	"fmt"
	"time"
)

// ReportRecordTTL is how long a Reporter remembers a report call: within
// it, Resolve says whether a call whose reply never came was applied.
// Resolved later, a call that was applied reads as not applied, and its
// units are charged once more when sent again (package tiers/localfirst
// caps what it resends at its share of the bucket).
const ReportRecordTTL = time.Minute

// ReportResult is what a Reporter did with one bucket of a report call.
type ReportResult struct {
	// Applied: the bucket was charged (false: its call failed, or was
	// refused as resolved already, and nothing changed).
	Applied bool
	// Charged is what was charged of the bucket's Cost: all of it, or as
	// many units as the bucket held. Cost − Charged is debt, for the
	// caller to report again later. A negative Cost (units given back) is
	// always applied whole: Charged = Cost.
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
// Report charges every bucket up to its Cost, each on its own (a report
// never denies: it charges as many units as the bucket holds, the floor
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
// Only TokenBucket and GCRA buckets can be reported. A store that
// partitions keys (a Redis Cluster) runs one atomic call per partition,
// each recorded on its own, and fills the results of the partitions
// that succeeded when others fail. Bad input (what ValidateReport
// refuses) is refused before anything is charged.
type Reporter interface {
	Store
	Report(ctx context.Context, instance, seq uint64, buckets []Bucket, res []ReportResult) error
	Resolve(ctx context.Context, instance, seq uint64, buckets []Bucket, res []ReportResult) error
}

// ValidateReport reports the first thing wrong with the arguments of a
// Reporter's Report or Resolve, or nil: instance 0; res shorter than
// buckets; a bucket with no key, the key of an earlier bucket, a limit
// that does not validate, an algorithm other than TokenBucket or GCRA, or
// a Cost beyond ±2^53.
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
		if !b.Limit.Algorithm.CanBookAhead() {
			return bucketError(i, b, fmt.Errorf("%s cannot be reported (token_bucket and gcra only)", b.Limit.Algorithm))
		}
	}
	return nil
}
