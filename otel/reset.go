package otel

import (
	"context"

	"github.com/floodgate-go/floodgate/quota"
)

// The instrumented store (Observer.Store) also forwards quota.Resetter:
// Reset and CanReset, like the capabilities listed at Store.

// CanReset reports whether the wrapped store can reset (quota.Resets).
func (w instrumentedStore) CanReset() bool { return quota.Resets(w.s) }

// Reset implements quota.Resetter with the wrapped store's Reset, untimed,
// or returns an error when it has none.
func (w instrumentedStore) Reset(ctx context.Context, buckets []quota.Bucket) error {
	r, ok := w.s.(quota.Resetter)
	if !ok {
		return w.lacks("Reset", "a quota.Resetter")
	}
	return r.Reset(ctx, buckets)
}
