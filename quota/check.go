package quota

import (
	"errors"
	"fmt"
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
// [0, MaxMaxWait] on a TokenBucket or GCRA limit. Errors read, for example:
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
