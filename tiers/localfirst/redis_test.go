package localfirst_test

import (
	"context"
	"strconv"
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

// TestGroupedReportsOnCluster: on a Redis Cluster, the reports of keys in
// different slots go out as one grouped take (the store splits it by
// slot) and each key is charged exactly what was spent.
func TestGroupedReportsOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	clk := clock.New(t0)
	rs, err := redisstore.New(c.Client(), redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	l := &countingLedger{Ledger: rs}
	s, err := localfirst.New(rs, l, localfirst.WithClock(clk), localfirst.WithManualSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	const keys = 12
	var bs []tiers.Bucket
	for i := range keys {
		// Distinct hash tags: the keys spread over the cluster's slots.
		b := bucket("{k"+strconv.Itoa(i)+"}:async", tiers.Async, 1, 1000)
		bs = append(bs, b)
		for range 5 { // a new key: all five decided locally
			if ok, _ := take(t, s, b); !ok {
				t.Fatal("denied far below the limit")
			}
		}
	}
	clk.Advance(10 * time.Second)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Reports != keys || st.ReportedUnits != 5*keys || st.ReportFailures != 0 {
		t.Fatalf("stats %+v: want %d reports of 5 units each", st, keys)
	}
	if got := l.takes.Load(); got != 1 {
		t.Fatalf("%d ledger takes, want 1 grouped take", got)
	}
	res := make([]tiers.Result, 1)
	for _, b := range bs {
		b.Cost, b.Consistency = 0, tiers.Exact
		if _, err := rs.Take(context.Background(), []tiers.Bucket{b}, res); err != nil {
			t.Fatal(err)
		}
		if res[0].Remaining != 995 {
			t.Fatalf("%s: %d left, want 995 (full, less the 5 reported)", b.Key, res[0].Remaining)
		}
	}
}
