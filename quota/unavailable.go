package quota

import "github.com/floodgate-go/floodgate"

// DecideUnavailable answers a Take the store could not decide, bucket by
// bucket by its OnStoreError, all or nothing: the one place where the fail
// modes are applied, used by the Limiter and by package fallback. It fills
// res (len(res) >= len(buckets)) and reports whether the Take is allowed.
//
//   - A cost above a bucket's capacity denies with RetryAfter Never, as
//     every store would.
//   - FailOpen allows: Limit is the capacity, Remaining capacity − cost.
//   - FailClosed denies with RetryAfter and Reset StoreErrorRetryAfter.
//   - FailLocal buckets are decided by local, called once with every
//     bucket, after the others, with their Results preset (Limit the
//     capacity, Source local_fallback) and allowed saying whether the Take
//     can still pass; local decides the FailLocal buckets whose cost is
//     within capacity, charges nothing unless the whole Take is allowed, and
//     returns whether it is. With a nil local they allow as FailOpen does
//     (Source fail_open): a store without a local fallback cannot honour
//     "local" (a Limiter warns about it at construction).
//
// An AtMost bucket is decided at its full Cost (no partial grant without
// the store); its Granted is that Cost when the Take is allowed.
//
// Each Result's Source names what decided it.
func DecideUnavailable(buckets []Bucket, res []Result, local func(buckets []Bucket, res []Result, allowed bool) bool) bool {
	allowed := true
	locals := 0
	for i := range buckets {
		b := &buckets[i]
		capacity := b.Limit.Capacity()
		r := Result{Limit: capacity, Source: failSource[b.OnStoreError]}
		mode := b.OnStoreError
		if mode == FailLocal && local == nil {
			mode, r.Source = FailOpen, floodgate.SourceFailOpen
		}
		switch {
		case b.Cost > capacity:
			r.RetryAfter = Never
			allowed = false
		case mode == FailOpen:
			r.Allowed = true
			r.Remaining = capacity - b.Cost
		case mode == FailClosed:
			r.RetryAfter = StoreErrorRetryAfter
			r.Reset = StoreErrorRetryAfter
			allowed = false
		default:
			locals++
		}
		res[i] = r
	}
	if locals > 0 {
		allowed = local(buckets, res, allowed)
	}
	if allowed {
		for i := range buckets {
			if buckets[i].AtMost {
				res[i].Granted = buckets[i].Cost
			}
		}
	}
	return allowed
}

var failSource = [...]floodgate.Source{
	FailLocal:  floodgate.SourceLocalFallback,
	FailOpen:   floodgate.SourceFailOpen,
	FailClosed: floodgate.SourceFailClosed,
}
