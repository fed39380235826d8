package quota

import (
	"errors"
	"fmt"
	"time"
)

// ValidateTake reports the first thing wrong with the arguments of a
// Store.Take, or nil. Every Store calls it before deciding, and a store
// guard (package fallback) calls it to tell a caller's mistake from a store
// failure, so bad input is refused with the same error text whichever store
// is behind the call.
//
// It checks, in this order: res has room for one Result per bucket; then
// each bucket in turn: its Key is not empty, no earlier bucket has the
// same Key, its Limit passes Limit.Validate, its Cost is not negative, and
// its OnStoreError is a known FailMode, and its MaxWait, if set, is in
// [0, MaxMaxWait] on a TokenBucket or GCRA limit; an AtMost bucket is in a
// take without MaxWait and has the Cost of every other AtMost bucket; a Span is on a
// FixedWindow limit, ends after it starts, within MaxSpan, in whole
// microseconds. Errors read, for example:
//
//	quota: bucket 2 ("fg:x"): cost -1 is negative
//
// An empty take (no buckets) is valid. ValidateTake does not allocate
// unless it reports an error.
func ValidateTake(buckets []Bucket, res []Result) error {
	if len(res) < len(buckets) {
		return fmt.Errorf("quota: res has room for %d results, want one per bucket (%d)", len(res), len(buckets))
	}
	for i := range buckets {
		b := &buckets[i]
		if b.Key == "" {
			return bucketError(i, b, errors.New("key is empty"))
		}
		for j := range i {
			if buckets[j].Key == b.Key {
				return bucketError(i, b, fmt.Errorf("same key as bucket %d", j))
			}
		}
		if err := b.Limit.Validate(); err != nil {
			return bucketError(i, b, err)
		}
		if b.Cost < 0 {
			return bucketError(i, b, fmt.Errorf("cost %d is negative", b.Cost))
		}
		if int(b.OnStoreError) >= len(failModeNames) {
			return bucketError(i, b, fmt.Errorf("OnStoreError %d is unknown", uint8(b.OnStoreError)))
		}
		if b.MaxWait != 0 {
			if err := checkMaxWait(b); err != nil {
				return bucketError(i, b, err)
			}
		}
		if b.AtMost || !b.Span.Start.IsZero() || !b.Span.End.IsZero() { // Span.IsZero, without copying the Span
			if err := checkPartialSpan(buckets, i); err != nil {
				return bucketError(i, b, err)
			}
		}
	}
	return nil
}

// checkPartialSpan reports what is wrong with bucket i's AtMost and Span.
func checkPartialSpan(buckets []Bucket, i int) error {
	b := &buckets[i]
	if b.AtMost {
		for j := range buckets {
			o := &buckets[j]
			if o.MaxWait != 0 {
				return fmt.Errorf("AtMost cannot wait: bucket %d of the take has MaxWait %s", j, o.MaxWait)
			}
			if j < i && o.AtMost && o.Cost != b.Cost {
				return fmt.Errorf("AtMost cost %d differs from bucket %d's %d: the AtMost buckets of a take share one grant", b.Cost, j, o.Cost)
			}
		}
	}
	if b.Span.IsZero() {
		return nil
	}
	sp := &b.Span
	switch d := sp.End.Sub(sp.Start); {
	case b.Limit.Algorithm != FixedWindow:
		return fmt.Errorf("Span needs fixed_window, not %s", b.Limit.Algorithm)
	case sp.Start.IsZero() || sp.End.IsZero():
		return errors.New("Span needs both Start and End")
	case d <= 0:
		return fmt.Errorf("Span ends (%s) before it starts (%s)", sp.End.Format(time.RFC3339Nano), sp.Start.Format(time.RFC3339Nano))
	case d > MaxSpan:
		return fmt.Errorf("Span of %s is above %s", d, MaxSpan)
	case sp.Start.Nanosecond()%1000 != 0 || sp.End.Nanosecond()%1000 != 0:
		return errors.New("Span is not in whole microseconds")
	}
	return nil
}

// checkMaxWait reports what is wrong with a bucket's MaxWait (not 0).
func checkMaxWait(b *Bucket) error {
	switch {
	case b.MaxWait < 0:
		return fmt.Errorf("MaxWait %s is negative", b.MaxWait)
	case b.MaxWait > MaxMaxWait:
		return fmt.Errorf("MaxWait %s is above %s", b.MaxWait, MaxMaxWait)
	case !b.Limit.Algorithm.CanBookAhead():
		return fmt.Errorf("MaxWait needs token_bucket or gcra: %s cannot book units ahead", b.Limit.Algorithm)
	}
	return nil
}

// bucketError names the bucket a problem of ValidateTake is about.
func bucketError(i int, b *Bucket, problem error) error {
	return fmt.Errorf("quota: bucket %d (%q): %w", i, b.Key, problem)
}
