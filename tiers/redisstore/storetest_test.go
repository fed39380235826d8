package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/testing/storetest"
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
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// sharedClient returns a client of the shared cluster (see
// redisstore.SharedCluster), for a test whose keys are its own by their
// names: a differential trace's prefix is its name, seed and rig number.
func sharedClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	c, _ := redisstore.SharedCluster(t)
	return c
}

// TestConformanceStandalone runs the suite on the default store: batched
// (WithBatching's defaults, 2 flushers of up to 64 takes).
func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		return fakeTimeStore(t, c, clk)
	})
}

// TestConformanceCluster runs the suite on the default store: single-slot
// takes batched per slot, multi-slot takes in parallel with refunds. On
// the shared cluster: the suite's keys are its own.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	c, prefix := redisstore.SharedCluster(t)
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		return fakeTimeStore(t, c, clk, redisstore.WithPrefix(prefix))
	})
}

// TestConformanceSentinel runs the suite (default store: batched) through
// a go-redis FailoverClient that finds the master through a real Redis
// Sentinel: merged calls go to the master Sentinel names.
func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	sn := redistest.StartSentinel(t)
	c := sn.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		return fakeTimeStore(t, c, clk)
	})
}

// TestConformanceUnbatched runs the suite with batching off: every take is
// its own call from the caller's goroutine.
func TestConformanceUnbatched(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		return fakeTimeStore(t, c, clk, redisstore.WithBatching(0, 0))
	})
}

// TestConformanceClusterUnbatched runs the suite on a cluster with
// batching off: single-slot takes are each one script call. On the shared
// cluster: the suite's keys are its own.
func TestConformanceClusterUnbatched(t *testing.T) {
	t.Parallel()
	c, prefix := redisstore.SharedCluster(t)
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		return fakeTimeStore(t, c, clk, redisstore.WithPrefix(prefix), redisstore.WithBatching(0, 0))
	})
}

// TestConformanceSmallBatches runs the suite with one flusher of at most 4
// takes: batches fill and queue behind each other under the concurrent
// cases.
func TestConformanceSmallBatches(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		return fakeTimeStore(t, c, clk, redisstore.WithBatching(1, 4))
	})
}
