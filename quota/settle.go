package quota

import (
	"context"
	"fmt"
)

// Settler is a Store that can adjust charges after the fact: what a
// Limiter needs for rules that settle a request's cost when it ends
// (Rule.Settle) and for rules whose requests wait (Rule.MaxWait), which
// give their booked units back when the wait is cancelled. Every store of
// this module implements it (memstore, redisstore, fallback, localfirst,
// and package otel's wrapper over any of them); NewLimiter and SetPolicy
// refuse a policy with such rules over a store that cannot (see Settles).
//
// Settle adds each bucket's Cost to what the bucket has been charged,
// signed: a positive Cost charges that many more units, a negative one
// gives -Cost units back, 0 changes nothing. Nothing is ever denied: a
// charge that overdraws the bucket is debt, which later takes wait out.
// The arithmetic, per algorithm, is in the Algorithm doc ("Settlement").
// Every bucket is adjusted at one reading of the store's clock, in one
// atomic step per store partition (one Redis script call per cluster
// slot), so no take sees a settlement half applied on one partition.
//
// took, when not nil, holds the Results the Take that charged the buckets
// reported for them, in the same order (len(took) >= len(buckets)): a
// store that decides some buckets itself (package fallback's local
// limiters, package tiers/localfirst's leases and async shares) reads
// each Result's Source to settle the bucket where its charge was made.
// nil means every bucket was charged by the store itself.
//
// Bad input (what ValidateSettle refuses) is refused with its error
// before anything is adjusted. A settlement that fails (the store is
// down, the call timed out) is not retried by the store: the error says
// so, and the adjustment may or may not have been applied, never twice.
// Implementations must be safe for concurrent use and must not retain
// buckets or took after Settle returns.
type Settler interface {
	Store
	Settle(ctx context.Context, buckets []Bucket, took []Result) error
}

// settleCapable is implemented by stores that wrap another (package
// fallback, package tiers/localfirst, package otel's store wrapper): they
// have a Settle method whatever they wrap, and report here whether what
// they wrap settles.
type settleCapable interface {
	CanSettle() bool
}

// Settles reports whether s can settle: s and every store beneath it
// (Layers) implement Settler, and none of them that has a CanSettle()
// bool method (a wrapper that implements Settle whatever it wraps) says
// it cannot. A wrapper that forwards Settle to the store beneath it
// settles only if that store does.
func Settles(s Store) bool {
	if s == nil {
		return false
	}
	for l := range Layers(s) {
		if _, ok := l.(Settler); !ok {
			return false
		}
		if c, ok := l.(settleCapable); ok && !c.CanSettle() {
			return false
		}
	}
	return true
}

// ValidateSettle reports the first thing wrong with the arguments of a
// Settler's Settle, or nil: what ValidateTake refuses of a take of the
// same buckets, except that a Cost may be negative (a refund) but not
// beyond ±MaxSettle; and took, when not nil, must have a Result per
// bucket. MaxWait is not consulted. Every store calls it, so bad input
// reads the same whichever store refuses it. It does not allocate unless
// it reports an error.
func ValidateSettle(buckets []Bucket, took []Result) error {
	if took != nil && len(took) < len(buckets) {
		return fmt.Errorf("quota: took has %d results, want one per bucket (%d)", len(took), len(buckets))
	}
	for i := range buckets {
		b := &buckets[i]
		if b.Key == "" {
			return bucketError(i, b, errSettleEmptyKey)
		}
		for j := range i {
			if buckets[j].Key == b.Key {
				return bucketError(i, b, fmt.Errorf("same key as bucket %d", j))
			}
		}
		if err := b.Limit.Validate(); err != nil {
			return bucketError(i, b, err)
		}
		if b.Cost > MaxSettle || b.Cost < -MaxSettle {
			return bucketError(i, b, fmt.Errorf("settlement %d is out of range [-2^53, 2^53]", b.Cost))
		}
		if int(b.OnStoreError) >= len(failModeNames) {
			return bucketError(i, b, fmt.Errorf("OnStoreError %d is unknown", uint8(b.OnStoreError)))
		}
		if !b.Span.IsZero() {
			return bucketError(i, b, errSettleSpan)
		}
	}
	return nil
}

var errSettleSpan = fmt.Errorf("a calendar window (Span) cannot be settled")

var errSettleEmptyKey = fmt.Errorf("key is empty")
