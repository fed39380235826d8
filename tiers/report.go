package tiers

import (
	"context"
	"fmt"
	"time"
)

// ReportMarkTTL is how long a Reporter remembers an instance's last
// report of a key. A report sent again within it (after a timeout whose
// call did reach the store) is never charged twice; one sent later is
// charged as new, at most once more (package tiers/localfirst caps what
// it resends at its share of the bucket).
const ReportMarkTTL = time.Minute

// Report is one instance's report of units it admitted on its own for a
// bucket (package tiers/localfirst's async shares), to be charged to the
// store's bucket. Reports are idempotent per (key, Instance): each carries
// the count the store acknowledged last (Acked) and a sequence number, so
// a report sent again after a call that timed out but did reach the store
// is not charged twice, and an old call that reaches the store late is
// ignored.
type Report struct {
	// Bucket is the bucket to charge; its Cost is the units this instance
	// has admitted since Acked and asks to have charged (at least 0).
	Bucket Bucket
	// Instance names the reporting instance (not 0); a key's reports from
	// one instance are ordered by Seq.
	Instance uint64
	// Seq numbers this attempt, above every earlier attempt of the same
	// key and Instance (a retry gets a new Seq too).
	Seq uint64
	// Acked is the Acked of the last ReportResult this instance received
	// for the key (0 before the first).
	Acked uint64
	// Since is the Seq of the key's oldest attempt since that result
	// whose reply never came (its call failed or timed out), or 0 when
	// there is none: what the store may have counted without the
	// instance knowing.
	Since uint64
}

// ReportResult is what a Reporter did with one Report.
type ReportResult struct {
	// Applied: the report was decided (false: its call failed, or it is
	// older than one the store has already seen, and nothing changed).
	Applied bool
	// Counted is what this call had to charge: the report's units less
	// those an earlier attempt of this instance, whose reply never came,
	// already counted, plus what that attempt counted and could not
	// charge (its debt, which the instance never learned). Charged is what it did charge: all of Counted,
	// or as many units as the bucket had left. Counted − Charged is
	// debt, for the instance to report again later.
	Counted, Charged int64
	// Acked is the count to send as the next Report's Acked.
	Acked uint64
	// Remaining is what the bucket has left after the charge.
	Remaining int64
}

// Reporter is a store that takes Reports: package tiers/localfirst's
// ledger reports async hits through it when it implements it (memstore
// and redisstore do), and otherwise by Take, where a timed-out report
// that did reach the store is charged again when sent again.
//
// Report decides every report, each on its own (a report never denies:
// it charges what it can): reports[i] into res[i]. For each it counts
// the units not counted before — Cost, or, when the attempt remembered
// for the key and Instance is one of those since Since, Cost less what
// the attempts since Acked counted (at least 0) plus that attempt's debt
// (see ReportResult.Counted) — charges as many of them as the bucket
// holds (floor of a token bucket's tokens, of a GCRA's remaining units),
// and remembers (Seq, the new count, the debt) for the key and Instance
// for ReportMarkTTL; a report whose Seq is not above the one remembered
// changes nothing (Applied false). Only TokenBucket and GCRA
// buckets can be reported. A store that partitions keys (a Redis Cluster)
// decides each partition's reports in one atomic step; when some fail,
// the others' results are filled and the error names the failure. Bad
// input (what ValidateReports refuses) is refused before anything is
// charged.
type Reporter interface {
	Store
	Report(ctx context.Context, reports []Report, res []ReportResult) error
}

// ValidateReports reports the first thing wrong with a Reporter's
// arguments, or nil: res shorter than reports; a bucket with no key, a
// limit that does not validate, or an algorithm other than TokenBucket
// or GCRA; a Cost below 0 or above 2^53; Instance 0; or the same key and
// Instance twice.
func ValidateReports(reports []Report, res []ReportResult) error {
	if len(res) < len(reports) {
		return fmt.Errorf("tiers: %d report results for %d reports", len(res), len(reports))
	}
	for i := range reports {
		r := &reports[i]
		b := &r.Bucket
		switch {
		case b.Key == "":
			return bucketError(i, b, errSettleEmptyKey)
		case b.Cost < 0:
			return bucketError(i, b, fmt.Errorf("report of %d units is negative", b.Cost))
		case b.Cost > MaxSettle:
			return bucketError(i, b, fmt.Errorf("report of %d units is above 2^53", b.Cost))
		}
		if err := b.Limit.Validate(); err != nil {
			return bucketError(i, b, err)
		}
		if !b.Limit.Algorithm.localModes() {
			return bucketError(i, b, fmt.Errorf("%s cannot be reported (token_bucket and gcra only)", b.Limit.Algorithm))
		}
		if r.Instance == 0 {
			return bucketError(i, b, fmt.Errorf("report Instance is 0"))
		}
		for j := range i {
			if reports[j].Bucket.Key == b.Key && reports[j].Instance == r.Instance {
				return bucketError(i, b, fmt.Errorf("same key and instance as report %d", j))
			}
		}
	}
	return nil
}
