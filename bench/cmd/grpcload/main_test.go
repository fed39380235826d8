package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestShortRun runs a short `grpcload` on four contenders with a few calls
// in flight: the bare service, the chain on the memstore and the chain over
// its own redis-server with 4 levels, unbatched and (1 level) batched.
// One round, whose warm-up and measured phase each end at their budget of
// 200 calls (-max-ops; their durations, a minute, are never reached), so
// every count is exact whatever the machine's speed. Every call must be
// admitted (the limits are far above the load), the unbatched Redis store
// must take exactly one round trip per call (one EVALSHA per Take on a
// standalone server) and the batched one at least one and at most one per
// call.
func TestShortRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	rows, err := run(ctx, []string{"grpcload", "-rounds", "1", "-warmup", "1m", "-duration", "1m", "-max-ops", "200", "-c", "8", "-only", "bare,chain-mem-4,chain-redis-4,chain-redis-1-batch"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for _, r := range rows {
		st := r.Stats
		if st.Ops != 200 || st.Errors != 0 {
			t.Errorf("%s: %d calls, %d errors (first %v); want the 200 of the budget, no error", r.Name, st.Ops, st.Errors, st.FirstErr)
			continue
		}
		if st.Allowed != st.Ops {
			t.Errorf("%s: %d of %d calls admitted, want all", r.Name, st.Allowed, st.Ops)
		}
		if r.Name == "chain-redis-1-batch" {
			if st.RoundTrips == 0 || st.RoundTrips > st.Ops {
				t.Errorf("%s: %d Redis round trips for %d calls, want 1..%d", r.Name, st.RoundTrips, st.Ops, st.Ops)
			}
			continue
		}
		wantRT := uint64(0)
		if r.Name == "chain-redis-4" {
			wantRT = st.Ops
		}
		if st.RoundTrips != wantRT {
			t.Errorf("%s: %d Redis round trips for %d calls, want %d", r.Name, st.RoundTrips, st.Ops, wantRT)
		}
	}
	for _, col := range []string{"x bare", "CPU x bare"} {
		if !strings.Contains(out.String(), col) {
			t.Errorf("table lacks the %q column:\n%s", col, out.String())
		}
	}
}

// TestLocalFirstRows runs the local-first contenders with hot principals
// (-dist zipf), beside the batched exact chain, each for a warm-up and a
// measured phase of 200 calls (-max-ops, as TestShortRun): no errors, and
// with every level leased or async most calls are decided without Redis,
// so both send fewer round trips than calls (leases, cold keys and async
// reports are what remains; the principals drawn are the same in every
// run, from seeded streams). The hottest users may go over their
// 1 000/s, so only a majority of calls must be admitted: the hottest
// principal gets about 15 % of the calls and its tenant never binds.
func TestLocalFirstRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	rows, err := run(ctx, []string{"grpcload", "-rounds", "1", "-warmup", "1m", "-duration", "1m", "-max-ops", "200", "-c", "8", "-dist", "zipf", "-only", "chain-redis-4-batch,chain-redis-4-leased,chain-redis-4-async"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	if !strings.Contains(out.String(), "keys=10000 (zipf, seed 1)") {
		t.Errorf("header does not name the zipf distribution:\n%s", out.String())
	}
	for _, r := range rows {
		st := r.Stats
		if st.Ops == 0 || st.Errors != 0 {
			t.Errorf("%s: %d calls, %d errors (first %v)", r.Name, st.Ops, st.Errors, st.FirstErr)
			continue
		}
		if 2*st.Allowed < st.Ops {
			t.Errorf("%s: %d of %d calls admitted, want most", r.Name, st.Allowed, st.Ops)
		}
		if r.Name != "chain-redis-4-batch" && (st.RoundTrips == 0 || st.RoundTrips >= st.Ops) {
			t.Errorf("%s: %d Redis round trips for %d calls, want 1..%d", r.Name, st.RoundTrips, st.Ops, st.Ops-1)
		}
	}
}

// TestBadDist checks that -dist names its mistake.
func TestBadDist(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := run(context.Background(), []string{"grpcload", "-dist", "pareto"}, &out)
	if err == nil || !strings.Contains(err.Error(), "-dist") {
		t.Fatalf("err = %v, want one naming -dist", err)
	}
}
