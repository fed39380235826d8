package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// TestMain lets the test binary be the service: startChild starts
// os.Executable() with -serve, which here is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serveFlag {
		if err := serve(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestShortRun runs `overload -short` on the dependency-bound service with
// two fixed capacities (the dependency slowed to 50ms): every row is
// measured, critical calls (never shed) are
// served, the shedder sheds some of the rest (the load is 3x what the
// service serves), the adaptive rows report the capacity they held, and
// the table and the targets are printed. The CPU-bound variant is left to
// the program: under the race detector on a loaded 2-core machine its
// one-core service falls so far behind that every call is late (a CI run
// served 0 % of critical calls), which says nothing of the shedder.
func TestShortRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	// A 50ms dependency keeps the offered rate near 1 000 calls/s: the load
	// generator keeps up with it even under the race detector.
	all, err := run(ctx, []string{"overload", "-short", "-variant", "dep", "-fixed", "4,16", "-dep-work", "50ms", "-markdown"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for variant, want := range map[string]int{"dep": 3} {
		rs := all[variant]
		if len(rs) != want {
			t.Fatalf("%s: %d rows, want %d", variant, len(rs), want)
		}
		shedSome := false
		for _, r := range rs {
			// Most critical calls served is the adaptive capacity's
			// promise; a fixed capacity is the baseline it is compared
			// with, and one equal to the dependency's (16) lets critical
			// calls queue past their deadline on a loaded host (a CI run
			// served 93 % of them, 65 late): that is the benchmark's
			// finding, not a failure.
			cr := r.critical()
			if cr.arrived == 0 || (r.fixed == 0 && cr.servedShare() < 0.99) {
				t.Errorf("%s %s: critical %d arrived, %.2f%% served; want most of them served", variant, r.name, cr.arrived, 100*cr.servedShare())
			}
			if r.goodput() <= 0 {
				t.Errorf("%s %s: no goodput", variant, r.name)
			}
			for p := floodgate.PriorityTest; p < floodgate.PriorityCritical; p++ {
				if r.class[p].shed > 0 {
					shedSome = true
				}
			}
			if r.fixed == 0 && (len(r.capSamples) == 0 || r.capacity == "-") {
				t.Errorf("%s %s: no capacity samples", variant, r.name)
			}
		}
		if !shedSome {
			t.Errorf("%s: nothing shed at 3x the service's throughput", variant)
		}
	}
	for _, s := range []string{"| capacity | shedder capacity | goodput/s |", "adaptive: goodput", "(best fixed)", "unloaded critical p99"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q", s)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"overload", "-variant", "gpu"},
		{"overload", "-fixed", "0"},
		{"overload", "-overload", "0.5"},
		{"overload", "-rounds", "0"},
	} {
		var out bytes.Buffer
		if _, err := run(context.Background(), args, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
