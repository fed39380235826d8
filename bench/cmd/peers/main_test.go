package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestShortRun runs the program on redis_rate-1 and floodgate-4 against
// its own redis-server for one round whose warm-up and measured phase each
// end at their budget of 200 decisions (-max-ops; their durations, a
// minute, are never reached), and checks the table's counts, which are
// exact: the budget's 200 decisions, redis_rate sends one EVALSHA per
// decision once the warm-up has loaded its script, floodgate's store one
// EVALSHA per 4-level Take, and at these limits no principal gets near its
// quota. (That -short makes the phases a second is harness's
// TestFlagsValues.)
func TestShortRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	rows, err := run(ctx, []string{"peers", "-rounds", "1", "-warmup", "1m", "-duration", "1m", "-max-ops", "200", "-only", "redis_rate-1,floodgate-4", "-c", "8"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Name != "floodgate-4" || rows[1].Name != "redis_rate-1" {
		t.Fatalf("rows %+v, want floodgate-4 and redis_rate-1", rows)
	}
	for _, r := range rows {
		st := r.Stats
		if st.Ops != 200 || st.Errors != 0 {
			t.Errorf("%s: %d decisions, %d errors (first %v); want the 200 of the budget, no error", r.Name, st.Ops, st.Errors, st.FirstErr)
			continue
		}
		if st.RoundTrips != st.Ops || st.Commands != st.Ops || st.Writes != st.Ops {
			t.Errorf("%s: %d round trips, %d commands, %d writes for %d decisions, want exactly one each",
				r.Name, st.RoundTrips, st.Commands, st.Writes, st.Ops)
		}
		if st.Allowed != st.Ops {
			t.Errorf("%s: %d of %d decisions allowed, want all at these limits", r.Name, st.Allowed, st.Ops)
		}
		if st.Latency.Count() != st.Ops || st.Latency.Quantile(0.99) <= 0 {
			t.Errorf("%s: latency histogram has %d samples, p99 %s", r.Name, st.Latency.Count(), st.Latency.Quantile(0.99))
		}
	}
	for _, want := range []string{"command: ", "-only redis_rate-1,floodgate-4", "redis:   ", "decisions/s", "x redis_rate-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
