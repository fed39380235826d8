package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/bench/internal/history"
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

// TestSmoke runs two processes for a second, exact at one level, healthy
// and with Redis paused: the table has its columns and one row per run,
// the processes decided and were over the limit (demand several times the
// rate), exact admitted nothing over any bucket's bound, paused or not,
// and no decision was made without Redis (a slow Redis never
// trips the fallback).
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rows, err := runFleet(ctx, []string{"fleetacc", "-procs", "2", "-dur", "1s", "-modes", "exact", "-levels", "1", "-pause", "both", "-pause-every", "300ms"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	for _, col := range []string{"mode", "levels", "redis", "decisions/s", "admitted", "allowed", "over", "over %", "under %", "bucket over", "local %", "RT/decision", "redis CPU µs/decision", "leases", "reports", "degraded"} {
		if !strings.Contains(out.String(), col) {
			t.Errorf("table lacks the %q column", col)
		}
	}
	for _, want := range []string{"command: fleetacc -procs 2", "exact 1-level healthy", "exact 1-level paused", "0 over: met"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, r := range rows {
		if len(r.results) != 2 {
			t.Errorf("%s: %d process results, want 2", r.spec, len(r.results))
		}
		if r.decisions < 2*uint64(r.acc.Allowed) {
			t.Errorf("%s: %d decisions for %.0f allowed: the load should be several times the limit", r.spec, r.decisions, r.acc.Allowed)
		}
		if r.admitted == 0 || r.acc.Excess != 0 || r.over() > 0 {
			t.Errorf("%s: admitted %d, allowed %.0f, %.0f over the buckets' bounds: exact must never be over", r.spec, r.admitted, r.acc.Allowed, r.acc.Excess)
		}
		if r.cond == paused && r.pauses == 0 {
			t.Errorf("%s: Redis was never paused", r.spec)
		}
		if r.local != 0 {
			t.Errorf("%s: %d local decisions in exact mode", r.spec, r.local)
		}
		// Redis slow in bursts is not down: no decision came from the
		// fallback (so no fail-closed deny and no open breaker).
		if r.degraded != 0 {
			t.Errorf("%s: %d decisions made without Redis while it was only slow", r.spec, r.degraded)
		}
	}
}

// TestBadFlags checks that every mistake is named.
func TestBadFlags(t *testing.T) {
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

// TestKilled runs two processes, exact and async at one level, rules
// failing closed, with Redis killed 1s into the run and restarted empty 2s later
// runFleet itself fails the run if a bucket admitted more than
// the outage bound or a process was back on Redis later than the open
// interval plus one probe plus go-redis's dial backoff. Here the test also
// checks that the outage was real: decisions were made without Redis, the
// breaker opened, and the processes recovered after the restart.
func TestKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rows, err := runFleet(ctx, []string{"fleetacc", "-procs", "2", "-dur", "5s", "-modes", "exact,async", "-levels", "1",
		"-pause", "off", "-kill", "2s", "-kill-at", "1s", "-on-store-error", "closed"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	killedRows := 0
	for _, r := range rows {
		if r.cond != killed {
			continue
		}
		killedRows++
		if r.restartedAt-r.killedAt < int64(2*time.Second) {
			t.Errorf("%s: Redis was down %s, want at least 2s", r.spec, time.Duration(r.restartedAt-r.killedAt))
		}
		if r.mode == "exact" && (r.degraded == 0 || r.opens == 0) {
			t.Errorf("%s: %d decisions without Redis and %d breaker opens: the outage did not reach the fallback", r.spec, r.degraded, r.opens)
		}
		if r.mode == "async" && r.repFail == 0 {
			t.Errorf("%s: no report failed during the outage", r.spec)
		}
		if r.lastBack <= r.restartedAt {
			t.Errorf("%s: no process came back on Redis after the restart", r.spec)
		}
		if r.admitted == 0 || r.errors != 0 {
			t.Errorf("%s: admitted %d with %d errors", r.spec, r.admitted, r.errors)
		}
	}
	if killedRows != 2 {
		t.Fatalf("%d killed runs, want 2", killedRows)
	}
	for _, want := range []string{"exact 1-level killed", "async 1-level killed", "back on Redis", "within the outage bound"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestSlowIsNotDown checks across processes that a slow Redis is not a down one (for
// rules with on_store_error local, see TestSlowIsNotDownLocal): 4 and 8
// processes, exact and async, one key at several times its limit, Redis
// stopped 30 ms every 300 ms, rules on_store_error closed. runFleet fails
// the run if anything was admitted over a bucket's bound (exact), a
// breaker opened, or a decision was made without Redis (so no fail-closed
// deny); the test also checks that Redis was paused and the key was at its
// limit.
func TestSlowIsNotDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and 12 processes")
	}
	for _, procs := range []string{"4", "8"} {
		t.Run(procs, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out bytes.Buffer
			rows, err := runFleet(ctx, []string{"fleetacc", "-procs", procs, "-dur", "2s", "-modes", "exact,async", "-levels", "1",
				"-keys", "1", "-pause", "on", "-pause-every", "300ms"}, &out)
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.pauses == 0 {
					t.Errorf("%s: Redis was never paused", r.spec)
				}
				if r.decisions < 2*uint64(r.acc.Allowed) {
					t.Errorf("%s: %d decisions for %.0f allowed: the key should be at its limit", r.spec, r.decisions, r.acc.Allowed)
				}
				if r.opens != 0 || r.degraded != 0 {
					t.Errorf("%s: %d breaker opens, %d decisions without Redis", r.spec, r.opens, r.degraded)
				}
			}
		})
	}
}

// TestHistory runs two processes, exact at four levels, with Redis paused,
// recording every take: the merged history is linearizable, every
// answered take carries its Redis time, and every decision made with
// Redis was recorded.
func TestHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rows, err := runFleet(ctx, []string{"fleetacc", "-procs", "2", "-dur", "1500ms", "-modes", "exact", "-levels", "4",
		"-pause", "on", "-pause-every", "300ms", "-history"}, &out)
	t.Log("\n" + out.String())
	if rows == nil {
		t.Fatal(err)
	}
	if err != nil {
		// The run's other targets (a paused Redis is not down) are
		// TestSmoke's; on a loaded machine a call can outwait the closed
		// timeout. Here only the history matters.
		t.Logf("a target other than the history's may have been missed: %v", err)
	}
	for _, r := range rows {
		h := r.hist
		if h == nil {
			t.Fatalf("%s: no history checked", r.spec)
		}
		if h.Verdict != history.Linearizable || h.Takes == 0 || h.WithTime != h.Takes {
			t.Errorf("%s: %s, want linearizable, every answered take with its Redis time", r.spec, h)
		}
		// Every decision is a recorded take, but those the fallback made
		// without calling Redis (a timed-out call is recorded, of
		// unknown outcome).
		if rec := uint64(h.Takes + h.Unknown); rec > r.decisions || rec+r.degraded < r.decisions {
			t.Errorf("%s: %d takes recorded for %d decisions, %d without Redis", r.spec, rec, r.decisions, r.degraded)
		}
	}
	if !strings.Contains(out.String(), "linearizable: met") {
		t.Error("the targets lack the history check")
	}
}

// TestHistoryBrokenStore runs the same fleet with process 0's store
// charging the levels of every 7th take one at a time (not all or
// nothing): the check fails, and so does the run, though no bucket is
// over its bound.
func TestHistoryBrokenStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rows, err := runFleet(ctx, []string{"fleetacc", "-procs", "2", "-dur", "1s", "-modes", "exact", "-levels", "4",
		"-pause", "off", "-history", "-broken", "split"}, &out)
	t.Log("\n" + out.String())
	if err == nil || !strings.Contains(err.Error(), "not linearizable") {
		t.Fatalf("err = %v, want the run failed for its history", err)
	}
	if len(rows) != 1 || rows[0].hist == nil || rows[0].hist.Verdict != history.NotLinearizable {
		t.Fatalf("rows %v: want one run whose history is not linearizable", rows)
	}
	if !strings.Contains(out.String(), "counterexample: after") {
		t.Error("no counterexample printed")
	}
}

// TestSlowIsNotDownLocal is TestSlowIsNotDown with the default rules
// (on_store_error local, the fallback's default 5 ms budget), so that
// calls outlive their budget in every pause and the local path runs: 4
// and 8 processes, exact, one key offered several times its limit and
// one offered 1.2 times it, Redis stopped 30 ms every 300 ms, with the
// counting rule. runFleet fails the run if a breaker opened; the test
// also checks the fleetacc targets of local rules: over within the
// fallback's bound, under at most 5 %, and Redis's count of what it was
// charged equal to what the fleet admitted, once every process has
// reported what it admitted locally.
func TestSlowIsNotDownLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and 24 processes")
	}
	for _, procs := range []string{"4", "8"} {
		for _, offered := range []string{"8000", "240"} {
			t.Run(procs+"/"+offered, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				var out bytes.Buffer
				rows, err := runFleet(ctx, []string{"fleetacc", "-procs", procs, "-dur", "2s", "-modes", "exact", "-levels", "1",
					"-keys", "1", "-offered", offered, "-pause", "on", "-pause-every", "300ms", "-on-store-error", "local", "-count"}, &out)
				t.Log("\n" + out.String())
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					if r.pauses == 0 {
						t.Errorf("%s: Redis was never paused", r.spec)
					}
					if r.opens != 0 {
						t.Errorf("%s: %d breaker opens", r.spec, r.opens)
					}
					if r.acc.FormulaExcess != 0 {
						t.Errorf("%s: %.0f units over the fallback's bound (%.0f allowed)", r.spec, r.acc.FormulaExcess, r.acc.Formula)
					}
					if u := r.underPct(); u > 5 {
						t.Errorf("%s: under by %.2f%%, want at most 5%%", r.spec, u)
					}
					if !r.countKnown || r.counted != r.admitted {
						t.Errorf("%s: Redis's count %d (read: %v), admitted %d: every unit admitted must be charged once", r.spec, r.counted, r.countKnown, r.admitted)
					}
				}
			})
		}
	}
}

// TestClusterLocal is TestSlowIsNotDownLocal on a 3-master Redis Cluster
// (-cluster), CI-sized: 2 processes for 2 s on one key offered 1.2 times
// its limit (60/s against 50/s burst 50), every master stopped 30 ms
// every 300 ms, on_store_error local at the default budget, with the
// counting rule: no breaker opens, no decision fails, over within the
// fallback's bound, under at most 5 %, and Redis's count (read through a
// cluster client) equal to what the fleet admitted.
func TestClusterLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and 2 processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rows, err := runFleet(ctx, []string{"fleetacc", "-cluster", "-procs", "2", "-dur", "2s", "-modes", "exact", "-levels", "1",
		"-keys", "1", "-rate", "50", "-burst", "50", "-offered", "60", "-pause", "on", "-pause-every", "300ms", "-pause-for", "30ms",
		"-on-store-error", "local", "-count"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Redis Cluster of 3 masters") || !strings.Contains(out.String(), "every master at once") {
		t.Error("the header does not say the run was on a cluster, every master paused")
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	if r.pauses == 0 || r.decisions == 0 {
		t.Errorf("%s: %d pauses, %d decisions", r.spec, r.pauses, r.decisions)
	}
	if r.opens != 0 || r.errors != 0 {
		t.Errorf("%s: %d breaker opens, %d errors", r.spec, r.opens, r.errors)
	}
	if r.acc.FormulaExcess != 0 {
		t.Errorf("%s: %.0f units over the fallback's bound (%.0f allowed)", r.spec, r.acc.FormulaExcess, r.acc.Formula)
	}
	if u := r.underPct(); u > 5 {
		t.Errorf("%s: under by %.2f%%, want at most 5%%", r.spec, u)
	}
	if !r.countKnown || r.counted != r.admitted {
		t.Errorf("%s: Redis's count %d (read: %v), admitted %d: every unit admitted must be charged once", r.spec, r.counted, r.countKnown, r.admitted)
	}
}
