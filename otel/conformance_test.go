package otel_test

import (
	"testing"

	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/storetest"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestConformanceInstrumented: the instrumented store passes the store
// suite over memstore, its report calls (the window algorithms' among
// them) included: it forwards every capability unchanged.
func TestConformanceInstrumented(t *testing.T) {
	o, err := fgotel.New()
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		s, err := memstore.New(memstore.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		return o.Store(s)
	})
}
