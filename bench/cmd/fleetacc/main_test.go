package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// TestMain lets the test binary be a process of the fleet: runFleet starts
// os.Executable() with -child, which here is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		if err := childMain(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "fleetacc child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestBadFlags checks that every mistake is named.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-modes", "eventual"},
		{"-levels", "2"},
		{"-pause", "sometimes"},
		{"-procs", "0"},
		{"-pause-for", "600ms"},
		{"-instances", "dns"},
		{"-on-store-error", "maybe"},
		{"-kill", "9s"},     // ends after -dur 5s
		{"-broken", "skip"}, // without -history
		{"-broken", "sometimes", "-history"},
		{"-pause-nodes", "some"},
		{"-failover"},                           // without -cluster
		{"-kill", "1s", "-cluster"},             // a cluster fails over instead
		{"-failover", "-cluster", "-dur", "3s"}, // no room for the promotion
		{"-closed-timeout", "1ms"},              // below -fallback-timeout's 5ms
		{"-algorithm", "leaky_bucket"},
		{"-algorithm", "sliding_window"}, // the library's name is sliding_window_counter
		{"-algorithm", "gcra"},           // not measured here
		{"-algorithm", "sliding_window_log"},
		{"-algorithm", "fixed_window", "-modes", "exact,leased"}, // leased books ahead
		{"-algorithm", "fixed_window", "-modes", "exact", "-history"},
		{"-algorithm", "sliding_window_counter", "-modes", "exact", "-kill", "1s"},
		{"-burst", "20", "-algorithm", "fixed_window", "-modes", "exact"}, // a window has no burst
		{"-pause-start", "5s"}, // not below -dur 5s
		{"-pause-start", "-1s"},
		{"-pause-start", "1s", "-pause", "off"},
	} {
		var out bytes.Buffer
		_, err := runFleet(context.Background(), append([]string{"fleetacc"}, args...), &out)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: err = %v, want one naming %s", args, err, args[0])
		}
	}
}

// TestAccuracy checks the bounds on hand-made counts: 4 principals at
// 10/s burst 5 over 2s may take 25 each; the 4-level tenant binds; light
// demand is all a perfect limiter admits.
func TestAccuracy(t *testing.T) {
	t.Parallel()
	ls := levelsFor(1, 10, 5, 4)
	none := func(level) float64 { return 0 }
	tb2s := boundsFor(quota.TokenBucket, 0, int64(2*time.Second))
	lots := []uint64{1000, 1000, 1000, 1000}
	a := measureAccuracy(ls, []uint64{25, 25, 25, 27}, lots, tb2s, none)
	if a.Allowed != 100 || a.Excess != 2 || a.Worst != "user/3" {
		t.Errorf("1 level: %+v, want allowed 100, excess 2 at user/3", a)
	}
	// Tenant: 30/s burst 15 -> 75 in 2s; users 25 each -> 100.
	ls4 := levelsFor(4, 10, 5, 4)
	a = measureAccuracy(ls4, []uint64{20, 20, 20, 20}, lots, tb2s, none)
	if a.Allowed != 75 || a.Excess != 5 || a.Worst != "tenant" {
		t.Errorf("4 levels: %+v, want allowed 75, excess 5 at tenant", a)
	}
	slack := func(l level) float64 { return float64(l.rate) } // 1s worth
	a = measureAccuracy(ls4, []uint64{20, 20, 20, 20}, lots, tb2s, slack)
	if a.Formula != 105 || a.FormulaExcess != 0 {
		t.Errorf("4 levels with slack: %+v, want formula 105 and no excess", a)
	}
	// Demand below the bounds: a perfect limiter admits all of it.
	a = measureAccuracy(ls4, []uint64{5, 10, 10, 10}, []uint64{5, 10, 10, 12}, tb2s, none)
	if a.Allowed != 37 || a.Excess != 0 {
		t.Errorf("4 levels, light demand: %+v, want allowed 37 (the demand)", a)
	}
}

// TestAlgorithmFlags checks what -algorithm sets: a window algorithm's
// levels take the rate as their capacity (-burst left out, or equal to
// -rate).
func TestAlgorithmFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		alg   quota.Algorithm
		burst int64
	}{
		{nil, quota.TokenBucket, 50},
		{[]string{"-algorithm", "fixed_window", "-modes", "exact"}, quota.FixedWindow, 200},
		{[]string{"-algorithm", "sliding_window_counter", "-modes", "exact", "-rate", "50", "-burst", "50"}, quota.SlidingWindowCounter, 50},
		{[]string{"-algorithm", "Fixed_Window", "-modes", "exact", "-pause", "on", "-pause-start", "4s", "-dur", "5s"}, quota.FixedWindow, 200},
	} {
		var out bytes.Buffer
		c, err := parseFlags(append([]string{"fleetacc"}, tc.args...), &out)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if c.alg != tc.alg || c.burst != tc.burst {
			t.Errorf("%v: algorithm %s burst %d, want %s burst %d", tc.args, c.alg, c.burst, tc.alg, tc.burst)
		}
	}
	var out bytes.Buffer
	_, err := parseFlags([]string{"fleetacc", "-algorithm", "sliding_window"}, &out)
	if err == nil || !strings.Contains(err.Error(), "sliding_window_counter") {
		t.Errorf("-algorithm sliding_window: err = %v, want one naming sliding_window_counter", err)
	}
}

// TestWindowBounds checks the bounds of each algorithm on hand-made
// spans: a token bucket's burst + rate × span; a window algorithm's limit
// per window the span touches, whole or partial.
func TestWindowBounds(t *testing.T) {
	t.Parallel()
	s := func(d time.Duration) int64 { return int64(d) }
	for _, tc := range []struct {
		first, last int64
		want        int64
	}{
		{s(0), s(0), 1},
		{s(200 * time.Millisecond), s(900 * time.Millisecond), 1},
		{s(999 * time.Millisecond), s(time.Second), 2},                            // across one boundary
		{s(300 * time.Millisecond), s(10*time.Second + 299*time.Millisecond), 11}, // a 10 s run
		{s(time.Second), s(11 * time.Second), 11},                                 // both ends on a boundary
		{s(5 * time.Second), s(4 * time.Second), 1},                               // no span
		{1_795_000_000_300_000_000, 1_795_000_075_300_000_000, 76},                // 75 s in 2026
	} {
		if got := windowsTouched(tc.first, tc.last, time.Second); got != tc.want {
			t.Errorf("windowsTouched(%d, %d) = %d, want %d", tc.first, tc.last, got, tc.want)
		}
	}
	if got := windowsTouched(-1, 0, time.Second); got != 2 {
		t.Errorf("windowsTouched(-1ns, 0) = %d, want 2 (floor, not truncation)", got)
	}

	ls := levelsFor(1, 50, 50, 1)
	first, last := s(300*time.Millisecond), s(10*time.Second+300*time.Millisecond)
	if got := boundsFor(quota.TokenBucket, first, last)(ls[0]); got != 550 {
		t.Errorf("token bucket 50/s burst 50 over 10 s: %v, want 550", got)
	}
	for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.SlidingWindowCounter} {
		if got := boundsFor(alg, first, last)(ls[0]); got != 550 {
			t.Errorf("%s 50 a second over 11 windows: %v, want 550", alg, got)
		}
		if got := boundsFor(alg, s(100*time.Millisecond), s(200*time.Millisecond))(ls[0]); got != 50 {
			t.Errorf("%s within one window: %v, want 50", alg, got)
		}
	}

	// Four levels of fixed windows, 10 a second per principal (burst =
	// rate, as parseFlags sets it), 4 principals over 3 windows: the
	// tenant (30 a window, shared) binds at 90, the users at 30 each.
	ls4 := levelsFor(4, 10, 10, 4)
	bnd := boundsFor(quota.FixedWindow, s(500*time.Millisecond), s(2500*time.Millisecond))
	lots := []uint64{1000, 1000, 1000, 1000}
	a := measureAccuracy(ls4, []uint64{25, 25, 25, 25}, lots, bnd, func(level) float64 { return 0 })
	if a.Allowed != 90 || a.Excess != 10 || a.Worst != "tenant" {
		t.Errorf("4 levels of fixed windows: %+v, want allowed 90, excess 10 at tenant", a)
	}
	a = measureAccuracy(ls4[1:2], []uint64{31, 30, 30, 30}, lots, bnd, func(level) float64 { return 0 })
	if a.Allowed != 120 || a.Excess != 1 || a.Worst != "user/0" {
		t.Errorf("user level of fixed windows: %+v, want allowed 120, excess 1 at user/0", a)
	}
}

// TestWinCappedDemand checks the per-window cap: 60 asked in a window of
// limit 50 counts 50, 20 counts 20; the shared tenant caps each window's
// sum.
func TestWinCappedDemand(t *testing.T) {
	t.Parallel()
	ls := levelsFor(1, 50, 50, 1)
	if got := winCappedDemand(ls, map[int64][]uint64{7: {60}, 8: {60}, 9: {20}}); got != 120 {
		t.Errorf("1 level: %v, want 50+50+20", got)
	}
	// 4 levels, 10 a window per principal, tenant 30 (shared).
	ls4 := levelsFor(4, 10, 10, 4)
	if got := winCappedDemand(ls4, map[int64][]uint64{1: {12, 12, 12, 12}, 2: {2, 3, 4, 5}}); got != 30+14 {
		t.Errorf("4 levels: %v, want 30 (tenant) + 14", got)
	}
}
