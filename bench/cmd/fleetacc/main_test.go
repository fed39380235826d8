package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
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
	lots := []uint64{1000, 1000, 1000, 1000}
	a := measureAccuracy(ls, []uint64{25, 25, 25, 27}, lots, 2*time.Second, none)
	if a.Allowed != 100 || a.Excess != 2 || a.Worst != "user/3" {
		t.Errorf("1 level: %+v, want allowed 100, excess 2 at user/3", a)
	}
	// Tenant: 30/s burst 15 -> 75 in 2s; users 25 each -> 100.
	ls4 := levelsFor(4, 10, 5, 4)
	a = measureAccuracy(ls4, []uint64{20, 20, 20, 20}, lots, 2*time.Second, none)
	if a.Allowed != 75 || a.Excess != 5 || a.Worst != "tenant" {
		t.Errorf("4 levels: %+v, want allowed 75, excess 5 at tenant", a)
	}
	slack := func(l level) float64 { return float64(l.rate) } // 1s worth
	a = measureAccuracy(ls4, []uint64{20, 20, 20, 20}, lots, 2*time.Second, slack)
	if a.Formula != 105 || a.FormulaExcess != 0 {
		t.Errorf("4 levels with slack: %+v, want formula 105 and no excess", a)
	}
	// Demand below the bounds: a perfect limiter admits all of it.
	a = measureAccuracy(ls4, []uint64{5, 10, 10, 10}, []uint64{5, 10, 10, 12}, 2*time.Second, none)
	if a.Allowed != 37 || a.Excess != 0 {
		t.Errorf("4 levels, light demand: %+v, want allowed 37 (the demand)", a)
	}
}
