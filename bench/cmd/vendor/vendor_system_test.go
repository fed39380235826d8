//go:build system

package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

func startRedis(t *testing.T) (string, func()) {
	addr, stop, err := redistest.StartProcess()
	if err != nil {
		t.Fatal(err)
	}
	return addr, stop
}

// TestGuardKeepsTheVendorQuota is the command's run, smaller: 4 processes
// offering 100 calls/s in all for 8 s to a vendor of 25/s burst 10, once
// as today's client (per-process back-off) and once behind the guard's
// outbound rule of 25/s burst 5 for the fleet. Behind the guard the vendor
// refuses at most 1% of the calls sent, and fewer than a quarter of what
// it refuses to today's client; no second receives more than rate +
// burst.
//
// Bounds, and why they hold on a loaded 2-core machine: the rule admits
// at most 25/s + 5, so the vendor's bucket (burst 10) has 5 tokens of
// margin, 200 ms of variation in the calls' transit (Redis reply to the
// vendor's read) before it refuses one; today's client resends from every
// process as soon as its own back-off ends, which the vendor refuses
// about a tenth of (11% in bench/README.md), so the comparison has a
// margin of several times.
func TestGuardKeepsTheVendorQuota(t *testing.T) {
	cfg, err := parseFlags([]string{"vendor", "-procs", "4", "-offered", "100", "-dur", "8s",
		"-vendor-rate", "25", "-rule-rate", "25"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr, stop := startRedis(t)
	defer stop()
	rows := map[string]result{}
	for i, mode := range []string{"none", "guard"} {
		r, err := runMode(ctx, cfg, mode, "redis://"+addr, i)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		t.Logf("%s: %+v", mode, r)
		rows[mode] = r
	}
	g, n := rows["guard"], rows["none"]
	if g.sent == 0 || float64(g.refused) > 0.01*float64(g.sent) || 4*g.refused >= n.refused {
		t.Errorf("guard: %d of %d sent refused; today's client: %d of %d; want at most 1%% and under a quarter of today's",
			g.refused, g.sent, n.refused, n.sent)
	}
	if g.maxSecond > 35 {
		t.Errorf("guard: %d calls in one second, want at most 35", g.maxSecond)
	}
}
