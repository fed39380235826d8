package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/testing/storetest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// fakeTimeStore returns a store on clk. Keys live at least a minute, so
// none expires in real time while fake time stands still during a test.
func fakeTimeStore(t *testing.T, c redis.UniversalClient, clk *clock.Fake, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	opts = append([]redisstore.Option{redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute)}, opts...)
	st, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return st
}

func TestConformanceStandalone(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) tiers.Store {
		return fakeTimeStore(t, c, clk)
	})
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) tiers.Store {
		return fakeTimeStore(t, c, clk)
	})
}

// TestConformanceSentinel runs the suite through a go-redis FailoverClient
// that finds the master through a real Redis Sentinel.
func TestConformanceSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t)
	c := sn.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) tiers.Store {
		return fakeTimeStore(t, c, clk)
	})
}

// TestConformanceBatched runs the suite with client-side batching on: the
// decisions of pipelined takes are the same.
func TestConformanceBatched(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) tiers.Store {
		st := fakeTimeStore(t, c, clk, redisstore.WithBatching(2, 16))
		t.Cleanup(func() { _ = st.Close() })
		return st
	})
}

// TestConformanceSentinelBatched runs the suite with batching through a
// FailoverClient: merged calls go to the master Sentinel names.
func TestConformanceSentinelBatched(t *testing.T) {
	sn := redistest.StartSentinel(t)
	c := sn.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) tiers.Store {
		st := fakeTimeStore(t, c, clk, redisstore.WithBatching(2, 16))
		t.Cleanup(func() { _ = st.Close() })
		return st
	})
}
