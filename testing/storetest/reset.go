package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// takeOnly wraps a store and hides every method but Take: a store that
// cannot reset.
type takeOnly struct{ quota.Store }

// CheckResetForwards checks that a store wrapper (fallback.Store, otel's
// instrumented store, localfirst.Store, ...) forwards quota.Resetter to
// the store it wraps. wrap returns the wrapper over the store it is given
// and fails t if it cannot build one. Over inner (a fresh
// quota.Resetter, such as a new memstore) the wrapper says it can reset
// (quota.Resets), and its Reset restores a bucket charged through it to
// full, read from inner afterwards; over a store without Reset it says it
// cannot (quota.Resets false), and its Reset returns an error naming the
// method and that store's type.
func CheckResetForwards(t *testing.T, inner quota.Resetter, wrap func(t *testing.T, inner quota.Store) quota.Store) {
	t.Helper()
	ctx := context.Background()
	w := wrap(t, inner)
	b := []quota.Bucket{{Key: "fg:{user=a}:r:fixed_window", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: time.Minute}, Cost: 2}}
	res := make([]quota.Result, 1)
	if ok, err := w.Take(ctx, b, res); !ok || err != nil || res[0].Remaining != 1 {
		t.Fatalf("Take through the wrapper: %v %v %+v; want allowed with 1 remaining", ok, err, res[0])
	}
	if !quota.Resets(w) {
		t.Fatalf("quota.Resets(wrapper over %T) = false", inner)
	}
	r, ok := w.(quota.Resetter)
	if !ok {
		t.Fatalf("the wrapper %T over %T is not a quota.Resetter", w, inner)
	}
	if err := r.Reset(ctx, b); err != nil {
		t.Fatalf("Reset through the wrapper: %v", err)
	}
	read := []quota.Bucket{b[0]}
	read[0].Cost = 0
	if _, err := inner.Take(ctx, read, res); err != nil || res[0].Remaining != 3 {
		t.Fatalf("after Reset through the wrapper, %T says %+v, %v; want 3 remaining", inner, res[0], err)
	}

	plain := takeOnly{inner}
	bare := wrap(t, plain)
	if quota.Resets(bare) {
		t.Error("quota.Resets(wrapper over a store without Reset) = true")
	}
	br, ok := bare.(quota.Resetter)
	if !ok {
		t.Fatalf("the wrapper %T over a store without Reset is not a quota.Resetter: it should have Reset and return an error", bare)
	}
	name := fmt.Sprintf("%T", plain)
	if err := br.Reset(ctx, b); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "Reset") {
		t.Errorf("Reset over a store without it: %v, want an error naming the method and the store (%s)", err, name)
	}
}
