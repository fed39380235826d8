package fallback_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/storetest"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestResetForwards: fallback.Store forwards Reset to the store it wraps
// (storetest.CheckResetForwards: the bucket is full again afterwards, read
// from the store beneath), says it can reset (quota.Resets) only when that
// store can, and over a store without Reset returns an error naming it.
func TestResetForwards(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckResetForwards(t, mem, func(t *testing.T, inner quota.Store) quota.Store {
		t.Helper()
		s, err := fallback.New(inner)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
