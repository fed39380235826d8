package fallback_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// plainStore has Take alone: it cannot reset.
type plainStore struct{ quota.Store }

// TestResetForwards: fallback.Store forwards Reset to the store it wraps (the
// bucket is full again afterwards, read from the store beneath), says it
// can reset (quota.Resets) only when that store can, and over a store
// without Reset returns an error naming it.
func TestResetForwards(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	wrap := func(inner quota.Store) quota.Store {
		t.Helper()
		s, err := fallback.New(inner)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w := wrap(mem)
	b := []quota.Bucket{{Key: "fg:{user=a}:r:fixed_window", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: time.Minute}, Cost: 2}}
	res := make([]quota.Result, 1)
	if ok, err := w.Take(ctx, b, res); !ok || err != nil || res[0].Remaining != 1 {
		t.Fatalf("Take: %v %v %+v", ok, err, res[0])
	}
	if !quota.Resets(w) {
		t.Fatal("quota.Resets(wrapper over memstore) = false")
	}
	if err := w.(quota.Resetter).Reset(ctx, b); err != nil {
		t.Fatal(err)
	}
	read := []quota.Bucket{b[0]}
	read[0].Cost = 0
	if _, err := mem.Take(ctx, read, res); err != nil || res[0].Remaining != 3 {
		t.Fatalf("after Reset through the wrapper, memstore says %+v, %v; want 3 remaining", res[0], err)
	}

	bare := wrap(plainStore{mem})
	if quota.Resets(bare) {
		t.Error("quota.Resets(wrapper over a store without Reset) = true")
	}
	if err := bare.(quota.Resetter).Reset(ctx, b); err == nil || !strings.Contains(err.Error(), "plainStore") || !strings.Contains(err.Error(), "Reset") {
		t.Errorf("Reset over a store without it: %v, want an error naming the method and the store", err)
	}
}
