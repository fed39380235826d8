package harness

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Rounds is a series of measurements: every contender in Names, Rounds
// times, interleaved (round 1 of each, then round 2 of each, ...) so that
// background load spreads over all of them.
type Rounds struct {
	// Names are the chosen contenders, in table order.
	Names []string
	// Rounds is how many times each is measured.
	Rounds int
	// NameWidth is the width of the name column of the progress lines.
	NameWidth int
	// Table is the table of the totals; its OpsUnit also names the rate
	// in the progress lines.
	Table Table
}

// Run calls measure for every round and contender, printing one progress
// line per measurement, then writes the table of each contender's totals
// and the load average to out. measure gets the round (from 1), the index
// into r.Names and a key prefix unique to the run, round and contender; its
// error is returned as it is, with no row.
func (r Rounds) Run(ctx context.Context, out io.Writer, measure func(ctx context.Context, round, i int, prefix string) (Stats, error)) ([]Row, error) {
	runID := strconv.FormatInt(time.Now().UnixNano()%1_000_000_007, 36)
	totals := make([]Stats, len(r.Names))
	for round := 1; round <= r.Rounds; round++ {
		for i, name := range r.Names {
			st, err := measure(ctx, round, i, "fgbench:"+runID+":"+strconv.Itoa(round)+":"+name+":")
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(out, "  round %d/%d  %-*s %8.0f %s/s  p99 %s\n", round, r.Rounds, r.NameWidth, name, st.PerSecond(), r.Table.OpsUnit, st.Latency.Quantile(0.99).Round(time.Microsecond))
			totals[i].Add(st)
		}
	}
	rows := make([]Row, len(r.Names))
	for i, name := range r.Names {
		rows[i] = Row{Name: name, Stats: totals[i]}
	}
	fmt.Fprintln(out)
	if err := r.Table.Write(out, rows); err != nil {
		return rows, err
	}
	if la, ok := LoadAvg(); ok {
		fmt.Fprintf(out, "loadavg: %s at end\n", la)
	}
	return rows, nil
}
