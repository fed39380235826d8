//go:build system

package demo_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/demo"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// The demo's runs are system tests: they drive real load for seconds on
// real servers (and Redis). What they assert holds on a loaded machine
// because it follows from the policy and the scenario, not from a rate:
// a busy machine sends fewer requests, later, and every bound below is one
// that fewer, slower requests still meet (free's burst of 10 is spent by
// any minute of its traffic, enterprise's 2,000 by none; critical calls
// are never shed by construction; a slower dependency only adds to the
// in-flight count the surge sheds test traffic on).

// checkReport asserts what every demo run must show: every row adds up,
// free tenants are limited before (and more than) enterprise ones, critical
// traffic is never shed, and the attack and brute force are limited; with
// compared, the overload comparison (checkComparison), and without it none.
func checkReport(t *testing.T, rep *demo.Report, compared bool) {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("store: %s\n%s", rep.Store, buf.String())
	for _, row := range rep.Rows {
		if !row.Balanced() {
			t.Errorf("%s: offered %d != allowed %d + limited %d + shed %d + failed %d",
				row.Group, row.Offered, row.Allowed, row.Limited, row.Shed, row.Failed)
		}
		if row.Failed != 0 {
			t.Errorf("%s: %d requests failed (neither served, limited nor shed)", row.Group, row.Failed)
		}
	}
	get := func(g string) demo.Row {
		row, ok := rep.Row(g)
		if !ok || row.Offered == 0 {
			t.Fatalf("no traffic in group %s", g)
		}
		return row
	}
	free, ent := get("tier=free"), get("tier=enterprise")
	if free.Limited == 0 {
		t.Errorf("free tier was never limited: %+v", free)
	}
	if ent.Limited != 0 {
		t.Errorf("enterprise tier was limited %d times; its plan covers its traffic", ent.Limited)
	}
	firstLimited := func(series string) int {
		for i, p := range rep.Series[series] {
			if p.Limited > 0 {
				return i
			}
		}
		return len(rep.Series[series]) + 1
	}
	if f, e := firstLimited("tier=free"), firstLimited("tier=enterprise"); f >= e {
		t.Errorf("free tier first limited at second %d, enterprise at %d: free must come first", f, e)
	}
	if crit := get("priority=critical"); crit.Shed != 0 {
		t.Errorf("critical traffic was shed %d times", crit.Shed)
	}
	if test := get("priority=test"); test.Shed == 0 {
		t.Errorf("the surge never made the shedder drop test traffic: %+v", test)
	}
	if bf := get("scenario=brute-force"); bf.Allowed > 5 && !restartedEmpty(rep) {
		t.Errorf("brute force got %d logins through; login-ip-user allows 5 per minute", bf.Allowed)
	}
	if atk := get("scenario=attack"); atk.Limited == 0 {
		t.Errorf("the scraper was never limited: %+v", atk)
	}
	var html bytes.Buffer
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "tier=free", "priority=test", "polyline", `id="timeline"`} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
	if strings.Contains(html.String(), "ZgotmplZ") {
		t.Error("HTML report contains a value html/template refused (ZgotmplZ)")
	}
	if !compared {
		if rep.Compare != nil {
			t.Errorf("the comparison ran with SkipCompare: %+v", rep.Compare)
		}
		return
	}
	checkComparison(t, rep, html.String())
}

// checkComparison asserts what the overload comparison must show: three
// runs that served calls; the shedders, fixed or adaptive, never refuse a
// critical call, the adaptive one holds a capacity near what the
// dependency serves (16 at once) rather than the fixed 40, and the
// adaptive concurrency limit, which knows no priorities, refuses critical
// calls with the rest. The report shows it in text, a caption, a table and
// a chart.
func checkComparison(t *testing.T, rep *demo.Report, html string) {
	t.Helper()
	c := rep.Compare
	if c == nil || len(c.Runs) != 3 {
		t.Fatalf("comparison: %+v, want 3 runs", c)
	}
	for _, r := range c.Runs {
		if r.Goodput <= 0 || len(r.Capacity) == 0 {
			t.Errorf("%s: goodput %.0f, %d capacity samples", r.Name, r.Goodput, len(r.Capacity))
		}
	}
	fixed, adaptive, vegas := c.Runs[0], c.Runs[1], c.Runs[2]
	if fixed.CriticalRefused != 0 || adaptive.CriticalRefused != 0 {
		t.Errorf("a shedder refused critical calls: fixed %d, adaptive %d", fixed.CriticalRefused, adaptive.CriticalRefused)
	}
	held := slices.Clone(adaptive.Capacity[len(adaptive.Capacity)/4:])
	slices.Sort(held)
	if med := held[len(held)/2]; med < 8 || med > 36 {
		t.Errorf("adaptive capacity held %d (median), want between 8 and 36 for a dependency of 16: %v", med, adaptive.Capacity)
	}
	if vegas.CriticalRefused == 0 {
		t.Errorf("the adaptive concurrency limit refused no critical call at 3x overload: %+v", vegas)
	}
	var text bytes.Buffer
	if err := rep.WriteTable(&text); err != nil {
		t.Fatal(err)
	}
	if _, ok := rep.Caption("overload"); !ok || !strings.Contains(text.String(), "adaptive concurrency (vegas)") ||
		!strings.Contains(html, `id="overload"`) || !strings.Contains(html, `id="overload-capacity"`) {
		t.Errorf("the comparison is missing from the caption, the text table or the HTML:\n%s", text.String())
	}
}

// TestDemoInProcess: 5 s of the scenario on the in-process store, then the
// overload comparison (three runs of 2 s), checked by checkReport: the
// one run that checks the comparison.
func TestDemoInProcess(t *testing.T) {
	var progress bytes.Buffer
	rep, err := demo.Run(context.Background(), demo.Config{Duration: 5 * time.Second, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Store, "memory") {
		t.Errorf("store = %q, want the in-process store", rep.Store)
	}
	if lines := strings.Count(progress.String(), "\n"); lines < 4 {
		t.Errorf("progress printed %d lines in 5 s:\n%s", lines, progress.String())
	}
	checkReport(t, rep, true)
}

// TestDemoOnRedis: 5 s of the scenario with its state in a redis-server
// of the test's own, checked by checkReport (the comparison, which keeps
// no state in Redis, is TestDemoInProcess's).
func TestDemoOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rep, err := demo.Run(context.Background(), demo.Config{Duration: 5 * time.Second, RedisURL: "redis://" + srv.Addr(), SkipCompare: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Store, "Redis at "+srv.Addr()) {
		t.Errorf("store = %q, want Redis at %s", rep.Store, srv.Addr())
	}
	checkReport(t, rep, false)
}

// TestDemoRedisUnreachableAtStart: a Redis that is not there is no reason
// to fail: the demo runs, deciding locally, and says so. A second of
// traffic makes hundreds of decisions, every one of them without Redis,
// however slowly the machine runs them.
func TestDemoRedisUnreachableAtStart(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill() // a free loopback port nothing listens on
	rep, err := demo.Run(context.Background(), demo.Config{Duration: time.Second, RedisURL: "redis://" + addr, SkipCompare: true})
	if err != nil {
		t.Fatalf("Run with Redis down: %v", err)
	}
	if !strings.Contains(rep.Store, "unreachable at start") {
		t.Errorf("store = %q, want it to say Redis was unreachable", rep.Store)
	}
	local := false
	for _, n := range rep.Notes {
		local = local || strings.Contains(n, "local_fallback")
	}
	if !local {
		t.Errorf("no local_fallback decision in the notes %q", rep.Notes)
	}
}

// restartedEmpty reports whether the run killed Redis and restarted it
// empty, which forgets every bucket (the brute force gets 5 more logins).
func restartedEmpty(rep *demo.Report) bool {
	return rep.Fault != nil && rep.Fault.Kind == demo.FaultKill && rep.Fault.For > 0
}
