package fallback_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// newMemStore returns the in-process store reading clk.
func newMemStore(t testing.TB, clk floodgate.Clock) quota.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatalf("memstore.New: %v", err)
	}
	return s
}
