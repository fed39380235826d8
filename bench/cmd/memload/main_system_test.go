//go:build system

package main

import (
	"bytes"
	"context"
	"testing"
)

// TestShortRun runs the latency and memory rows once, short, at 2x the
// limit in flight. Bounds, and why they hold on a loaded 2-core machine:
//   - The memory row's Go memory (total less released, sampled every
//     10ms) never passes 1.25x the limit. Its shedder refuses calls from
//     the window whose live heap reaches 80% of the limit, so the buffers
//     in flight stay near 0.8x; the runtime holds the rest under the
//     limit by collecting. A collection that lags a burst of arrivals by
//     a 100ms window lets in at most a window's arrivals (64 MiB at this
//     rate), but the buffers of the calls admitted before it are freed as
//     fast: a run on this machine peaked at 1.02x.
//   - The latency row's peak passes the limit: 2x the limit is offered
//     in flight, and its handler's latency does not rise (the buffers
//     are held on a timer), so nothing tells its shedder to shed.
func TestShortRun(t *testing.T) {
	var out bytes.Buffer
	results, err := run(context.Background(), []string{"memload", "-rows", "latency,memory", "-overload", "2",
		"-rounds", "1", "-warmup", "1s", "-duration", "2s"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	peak := func(r result) float64 {
		p := int64(0)
		for _, m := range r.st.Mem {
			p = max(p, m)
		}
		return float64(p) / float64(r.st.Limit)
	}
	lat, memRow := results[0], results[1]
	if len(memRow.st.Mem) == 0 || memRow.shed == 0 || peak(memRow) > 1.25 {
		t.Errorf("memory row: %d samples, %d shed, peak %.2fx the limit; want samples, sheds, and at most 1.25x", len(memRow.st.Mem), memRow.shed, peak(memRow))
	}
	if peak(lat) <= 1 {
		t.Errorf("latency row: peak %.2fx the limit; want above it (2x offered)", peak(lat))
	}
}
