package fallback_test

import (
	"testing"
	"time"

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

// Budgets and waits of the tests over a real Redis in the fast tier: no
// wall-clock bound, only budgets no healthy call comes near on a loaded
// machine (a healthy call under load takes tens of milliseconds), so that
// only the fault a test makes sends a take to the fallback.
const (
	// healthyBudget is the call budget where the fault fails the call at
	// once (a stalling ledger, a refused connection): it is never
	// waited out.
	healthyBudget = time.Minute
	// pauseBudget is the call budget where the fault is a stopped
	// Redis: the take that meets it waits the budget out, once.
	pauseBudget = 2 * time.Second
	// lateWait bounds the wait for an event that follows at once (a
	// resumed Redis's late answer, a Sync).
	lateWait = 30 * time.Second
)
