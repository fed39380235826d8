package localfirst_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/storetest"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestResetForwards: localfirst.Store forwards Reset to the store it wraps
// (storetest.CheckResetForwards: the bucket is full again afterwards, read
// from the store beneath), says it can reset (quota.Resets) only when that
// store can, and over a store without Reset returns an error naming it.
// The memstore beneath is also the ledger.
func TestResetForwards(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckResetForwards(t, mem, func(t *testing.T, inner quota.Store) quota.Store {
		t.Helper()
		s, err := localfirst.New(inner, mem, localfirst.WithManualSync())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	})
}
