package memstore

import (
	"testing"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/storetest"
)

// State kept an hour past its TTL must not change any conformance answer:
// that is what lets the Redis store, whose keys expire on real time, run
// the suite on a fake clock with generous TTLs.
func TestConformanceWithLongerTTLs(t *testing.T) {
	ttlSlack = 3_600_000_000
	defer func() { ttlSlack = 0 }()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		s, err := New(WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
