package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// windowWrong is a Reporter that gets the window reports wrong one way:
// "now" charges every window bucket to the window current at the
// store's now (Admitted ignored, as if reports had no time); "capped"
// charges a window no more than it has left, as a token bucket is.
type windowWrong struct {
	quota.Reporter
	clk *clock.Fake
	how string
}

func (w windowWrong) Report(ctx context.Context, instance, seq uint64, bs []quota.Bucket, res []quota.ReportResult) error {
	bs = append([]quota.Bucket(nil), bs...)
	for i := range bs {
		b := &bs[i]
		if b.Limit.Algorithm.CanBookAhead() {
			continue
		}
		switch w.how {
		case "now":
			b.Admitted = w.clk.Now()
		case "capped":
			if b.Cost > 0 {
				var r [1]quota.Result
				if _, err := w.Take(ctx, []quota.Bucket{{Key: b.Key, Limit: b.Limit}}, r[:]); err != nil {
					return err
				}
				b.Cost = min(b.Cost, r[0].Remaining)
			}
		}
	}
	return w.Reporter.Report(ctx, instance, seq, bs, res)
}

// TestWindowReportTracesCatchWrongStores: each window report trace
// fails a store that charges the window current when the report arrives
// rather than the one the units were admitted in, and one that caps a
// window's charge at what it has left; memstore passes them all.
func TestWindowReportTracesCatchWrongStores(t *testing.T) {
	for _, w := range windowReports {
		t.Run(w.limit.Algorithm.String(), func(t *testing.T) {
			clk := clock.New(clock.Epoch)
			if msgs := runRecorded(func(r reporter) { reportWindowTrace(r, mem(t, clk), clk, "ok:", w.limit) }); len(msgs) != 0 {
				t.Fatalf("memstore fails the trace:\n%s", strings.Join(msgs, "\n"))
			}
			for _, how := range []string{"now", "capped"} {
				clk := clock.New(clock.Epoch)
				st := windowWrong{Reporter: mem(t, clk), clk: clk, how: how}
				if msgs := runRecorded(func(r reporter) { reportWindowTrace(r, st, clk, how+":", w.limit) }); len(msgs) == 0 {
					t.Errorf("a store that gets window reports wrong (%s) passes the trace", how)
				}
			}
		})
	}
}
