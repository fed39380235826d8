package localfirst_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestOverRedis runs both local modes over a real redis-server as the
// ledger, on fake time: the same exact counts as over the in-process store.
func TestOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(t0)
	rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	s, err := localfirst.New(rs, rs, localfirst.WithClock(clk), localfirst.WithManualSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	for _, mode := range []tiers.Consistency{tiers.Leased, tiers.Async} {
		b := bucket("redis-"+mode.String(), mode, 10, 10)
		n, src := drain(t, s, 100, b)
		if n != 10 {
			t.Fatalf("%s: admitted %d in one instant (%v), want the burst 10", mode, n, src)
		}
		local := src[floodgate.SourceLease] + src[floodgate.SourceAsync]
		if local == 0 {
			t.Fatalf("%s: nothing was decided locally (%v)", mode, src)
		}
	}
	// Close reports the async hits: the ledger's bucket is empty.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := bucket("redis-async", tiers.Exact, 10, 10)
	res := make([]tiers.Result, 1)
	b.Cost = 0
	if _, err := rs.Take(context.Background(), []tiers.Bucket{b}, res); err != nil || res[0].Remaining != 0 {
		t.Fatalf("after Close the async bucket has %d left (%v), want 0", res[0].Remaining, err)
	}
}
