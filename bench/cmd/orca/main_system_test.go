//go:build system

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestShortRun runs `orca -short -load 0.75`: both rows, every call
// counted once and reached a known replica, weighted_round_robin with
// ORCA sent the half-capacity replica less than a full one, and it shed
// at most a third of what round_robin shed.
//
// Bounds, and why they hold on a loaded 2-core machine: the replicas'
// capacity is time (a handler holding a slot for 100ms), not CPU, so a
// busy machine slows the calls' CPU work (tens of microseconds) and not
// the capacity. round_robin offers the third replica 1.5x what it holds
// (a third of 75% of 150 slots, 37.5, against 30, shed from 27): it
// sheds about a quarter of that replica's calls, which no schedule
// changes. weighted_round_robin weights each replica by what it serves
// per unit of utilisation, capacity over service time, so it offers
// the third replica half of a full one's share and each replica runs
// at 75%, below the 90% it sheds from; -load 0.75 leaves room for the
// Poisson arrivals' bursts (runs of the program shed 0.11 of
// round_robin's sheds at 0.75, 0.28 at 0.8).
func TestShortRun(t *testing.T) {
	checkShortRun(t, 1.0/3, "orca", "-short", "-load", "0.75")
}

// TestShortRunStalled is TestShortRun with the sender held 150ms every
// 700ms, as a process the VM's other work deschedules is: the arrivals
// it falls behind with are skipped (the late column), not sent in one
// burst that puts every replica over capacity at once. Sent so, the
// bursts shed 0.66-0.69 of round_robin's sheds with weighted_round_robin
// (its full replicas run closer to their shedding point), and a CI run on
// a busy machine failed TestShortRun at 2.5.
//
// Its bound is half of round_robin's sheds, not TestShortRun's third:
// after each stall the arrivals up to 10ms late are still sent, a small
// burst of their own, and a loaded host stalls the sender more often
// than the test does. It sheds 0.15-0.19 on a quiet machine and gave
// 0.354 in a CI run at load 3.9; half still fails the bursts the skip
// prevents (0.66-0.69).
func TestShortRunStalled(t *testing.T) {
	checkShortRun(t, 0.5, "orca", "-short", "-load", "0.75", "-stall", "150ms")
}

// checkShortRun runs the program with args and checks what TestShortRun
// says, with weighted_round_robin shedding at most the share most of
// round_robin's sheds.
func checkShortRun(t *testing.T, most float64, args ...string) {
	t.Helper()
	var out bytes.Buffer
	all, err := run(context.Background(), args, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	rr, wrr := all["rr"], all["wrr"]
	if rr == nil || wrr == nil {
		t.Fatalf("rows %v, want rr and wrr", all)
	}
	for name, c := range all {
		if sum := c.perSent[0] + c.perSent[1] + c.perSent[2]; sum != c.sent {
			t.Errorf("%s: %d sent, %d by replica", name, c.sent, sum)
		}
		if sum := c.perShed[0] + c.perShed[1] + c.perShed[2]; sum != c.shed {
			t.Errorf("%s: %d shed, %d by replica", name, c.shed, sum)
		}
	}
	if rr.shed == 0 {
		t.Fatalf("round_robin shed nothing:\n%s", out.String())
	}
	if wrr.perSent[2] >= wrr.perSent[0] || wrr.perSent[2] >= wrr.perSent[1] {
		t.Errorf("weighted_round_robin sent the half replica %d calls, the full ones %d and %d", wrr.perSent[2], wrr.perSent[0], wrr.perSent[1])
	}
	if float64(wrr.shed) > most*float64(rr.shed) {
		t.Errorf("weighted_round_robin shed %d, more than %.2f of round_robin's %d", wrr.shed, most, rr.shed)
	}
	if !strings.Contains(out.String(), "shed with weighted_round_robin+ORCA / shed with round_robin") {
		t.Errorf("no ratio line:\n%s", out.String())
	}
}
