package history

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestRecorderReports: over a store that takes report calls (memstore
// here), the Recorder is a quota.Reporter that passes them on and records
// each charged bucket of a key a recorded take touched as a report Op (the
// units charged, the remaining count); a report on a key no recorded take
// touched is passed on and skipped; the history of takes and reports is
// linearizable, and the same takes without the report are not.
func TestRecorderReports(t *testing.T) {
	ms, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(ms, 3)
	var _ quota.Reporter = rec
	ctx := context.Background()
	lim := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 5}
	b := func(key string, cost int64) []quota.Bucket {
		return []quota.Bucket{{Key: key, Cost: cost, Limit: lim, Consistency: quota.Exact}}
	}
	take := func(key string) {
		t.Helper()
		res := make([]quota.Result, 1)
		if ok, err := rec.Take(ctx, b(key, 1), res); !ok || err != nil {
			t.Fatalf("take %s: %v %v", key, ok, err)
		}
	}
	report := func(seq uint64, key string, cost int64) {
		t.Helper()
		res := make([]quota.ReportResult, 1)
		if err := rec.Report(ctx, 7, seq, b(key, cost), res); err != nil || !res[0].Applied {
			t.Fatalf("report %s: %v %+v", key, err, res[0])
		}
	}
	take("warm")
	rec.Start()
	take("k")
	report(1, "k", 2)
	report(2, "warm", 1) // no recorded take on it: skipped
	take("k")
	rec.Stop()
	ops := rec.Ops()
	if len(ops) != 3 || !ops[1].Report || ops[1].Proc != 3 || ops[1].Buckets[0].Cost != 2 || ops[1].Buckets[0].Remaining != 2 {
		t.Fatalf("recorded %d ops, want take, report of 2 leaving 2, take: %+v", len(ops), ops)
	}
	if rec.Skipped() != 1 {
		t.Errorf("%d skipped, want the report on the warm-up key", rec.Skipped())
	}
	want(t, History{Ops: ops}, Linearizable)
	want(t, History{Ops: []Op{ops[0], ops[2]}}, NotLinearizable)
}
