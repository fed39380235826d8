package main

import (
	"io"
	"strings"
	"testing"
)

// Bad flags are named; a short run prints every row of its table.
func TestDeadlineFlagsAndTable(t *testing.T) {
	for _, bad := range [][]string{{"-slots", "0"}, {"-overload", "0"}, {"-rounds", "0"}, {"-deadline", "-1s"}} {
		if _, err := parse(append([]string{"deadline"}, bad...), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	var out strings.Builder
	if err := run([]string{"deadline", "-slots", "2", "-work", "2ms", "-duration", "200ms", "-warmup", "0s", "-rounds", "1", "-unaware"}, &out); err != nil {
		t.Fatal(err)
	}
	table := out.String()[strings.Index(out.String(), "offered/s"):]
	for _, row := range []string{"fifo", "lifo", "codel", "fifo-unaware", "lifo-unaware", "codel-unaware"} {
		if !strings.Contains(table, " "+row+" ") {
			t.Errorf("no %s row in the table:\n%s", row, table)
		}
	}
}
