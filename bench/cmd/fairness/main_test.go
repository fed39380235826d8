package main

import (
	"io"
	"strings"
	"testing"
)

// Bad flags are named; a short run prints every row of its table.
func TestFairnessFlagsAndTable(t *testing.T) {
	for _, bad := range [][]string{{"-tenants", "1"}, {"-noisy", "0"}, {"-rounds", "0"}, {"-arrivals", "bursty"}, {"-rows", "x"}} {
		if _, err := parse(append([]string{"fairness"}, bad...), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	var out strings.Builder
	if err := run([]string{"fairness", "-capacity", "10", "-work", "5ms", "-duration", "200ms", "-warmup", "0s", "-rounds", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	table := out.String()[strings.Index(out.String(), "capacity/s"):]
	for _, row := range []string{"shedder", "shedder-fair", "queue", "queue-fair"} {
		if !strings.Contains(table, " "+row+" ") {
			t.Errorf("no %s row in the table:\n%s", row, table)
		}
	}
}
