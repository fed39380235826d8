package quota

import "context"

// Resetter is a Store that can restore buckets to full capacity by
// forgetting their state: what an operator needs when a principal is
// wrongly blocked (tiers.Limiter.Reset, the floodgate reset command).
// memstore and redisstore implement it; the wrappers of this module
// (fallback, tiers/localfirst, package otel's) forward it to the store
// they wrap.
//
// Reset deletes the state kept at each bucket's Key, so the bucket's next
// Take finds it full, as if it had never been charged; only Key is read.
// A key with no state is not an error. It is not atomic across buckets;
// an error means some buckets may not have been reset, and Reset may be
// called again (it is idempotent). Implementations must be safe for
// concurrent use and must not retain buckets.
type Resetter interface {
	Store
	Reset(ctx context.Context, buckets []Bucket) error
}

// resetCapable is implemented by wrappers that have a Reset method
// whatever they wrap, and report here whether what they wrap resets.
type resetCapable interface {
	CanReset() bool
}

// Resets reports whether s can reset: s and every store beneath it
// (Layers) implement Resetter, and none of them that has a CanReset()
// bool method says it cannot.
func Resets(s Store) bool {
	if s == nil {
		return false
	}
	for l := range Layers(s) {
		if _, ok := l.(Resetter); !ok {
			return false
		}
		if c, ok := l.(resetCapable); ok && !c.CanReset() {
			return false
		}
	}
	return true
}
