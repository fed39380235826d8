package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestShortRun runs the program as `peers -short -only redis_rate-1,floodgate-4`
// against its own redis-server and checks the table's counts, which are
// exact: redis_rate sends one EVALSHA per decision once the warm-up has
// loaded its script, floodgate's store one EVALSHA per 4-level Take, and at
// these limits no principal gets near its quota.
func TestShortRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	rows, err := run(ctx, []string{"peers", "-short", "-only", "redis_rate-1,floodgate-4", "-c", "8"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Name != "floodgate-4" || rows[1].Name != "redis_rate-1" {
		t.Fatalf("rows %+v, want floodgate-4 and redis_rate-1", rows)
	}
	for _, r := range rows {
		st := r.Stats
		if st.Ops == 0 || st.Errors != 0 {
			t.Errorf("%s: %d decisions, %d errors (first %v)", r.Name, st.Ops, st.Errors, st.FirstErr)
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
		if st.Elapsed < time.Second || st.Elapsed > 10*time.Second {
			t.Errorf("%s: measured phase took %s, want about 1s in -short mode", r.Name, st.Elapsed)
		}
	}
	for _, want := range []string{"command: ", "-only redis_rate-1,floodgate-4", "redis:   ", "decisions/s", "x redis_rate-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
