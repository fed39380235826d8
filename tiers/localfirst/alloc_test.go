package localfirst_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestSyncAllocationsDoNotGrowWithKeys: a sync reporting thousands of
// keys allocates per report call, not per key. A job holds a whole
// Bucket (176 bytes) and a call's buckets escape to the ledger: rebuilt
// every tick, they were about 550 bytes a key, several MB a second on a
// busy store, and garbage the collector paid for on every request.
func TestSyncAllocationsDoNotGrowWithKeys(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	// No collection during the test: one empties the sync.Pool of report
	// buffers, and the flush measured would allocate them again.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	clk := clock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	s, err := localfirst.New(ledger, ledger, localfirst.WithClock(clk), localfirst.WithManualSync())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	const keys = 2000
	bs := make([]quota.Bucket, keys)
	for i := range bs {
		bs[i] = bucket("k"+strconv.Itoa(i), quota.Async, 1_000_000, 1_000_000)
	}
	ctx := context.Background()
	hitAll := func() {
		res := make([]quota.Result, 1)
		for i := range bs {
			if ok, err := s.Take(ctx, bs[i:i+1], res); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
	}
	// Rounds first: the ledger learns every key and the buffers grow.
	for range 3 {
		hitAll()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	hitAll()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	perKey := float64(m1.TotalAlloc-m0.TotalAlloc) / keys
	t.Logf("a Flush of %d keys allocated %.1f bytes a key", keys, perKey)
	// Before, 939 bytes a key: a job each (a whole Bucket, in a slice
	// regrown every sync) and 11 KB of buckets per report call. Now the
	// report calls' contexts and goroutines, and a pooled buffer whenever
	// more calls run at once than in the rounds before (up to 16).
	if perKey > 200 {
		t.Errorf("a Flush of %d keys allocated %.1f bytes a key, want at most 200: per call, not per key", keys, perKey)
	}
}
