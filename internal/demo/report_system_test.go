//go:build system

package demo_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/internal/demo"
)

// node is any SVG element, for walking the report's timeline.
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []node     `xml:",any"`
	Text    string     `xml:",chardata"`
}

func (n *node) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// find returns every element below n (n included) for which ok is true.
func (n *node) find(ok func(*node) bool) []*node {
	var out []*node
	if ok(n) {
		out = append(out, n)
	}
	for i := range n.Nodes {
		out = append(out, n.Nodes[i].find(ok)...)
	}
	return out
}

func hasClass(class string) func(*node) bool {
	return func(n *node) bool { return n.attr("class") == class }
}

// timeline parses the report's timeline SVG out of its HTML.
func timeline(t *testing.T, page string) *node {
	t.Helper()
	i := strings.Index(page, `<svg id="timeline"`)
	j := strings.Index(page, "</svg>")
	if i < 0 || j < i {
		t.Fatalf("the report has no timeline SVG")
	}
	var root node
	if err := xml.Unmarshal([]byte(page[i:j+len("</svg>")]), &root); err != nil {
		t.Fatalf("the timeline is not well-formed XML: %v", err)
	}
	return &root
}

// points parses an SVG points attribute.
func points(t *testing.T, s string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(s) {
		xs, ys, ok := strings.Cut(p, ",")
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("bad point %q", p)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

func ints(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad data-counts %q", s)
		}
		out = append(out, n)
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 0.11 }

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

// checkOneTimeAxis asserts that the timeline has one time axis, that every
// panel is drawn on it, and that every series has exactly one value per
// bucket, the last bucket ending at the end of the run.
func checkOneTimeAxis(t *testing.T, rep *demo.Report, svg *node) {
	t.Helper()
	axes := svg.find(hasClass("x-axis"))
	if len(axes) != 1 {
		t.Fatalf("the timeline has %d time axes, want 1", len(axes))
	}
	ax := axes[0]
	n := rep.Axis.Buckets
	if ax.attr("data-buckets") != strconv.Itoa(n) {
		t.Errorf("axis has %s buckets, the report %d", ax.attr("data-buckets"), n)
	}
	if got := time.Duration(n) * rep.Axis.Width; rep.Duration-got >= time.Duration(n) || got > rep.Duration {
		t.Errorf("%d buckets of %s cover %s of a %s run: a partial bucket", n, rep.Axis.Width, got, rep.Duration)
	}
	x0, _ := strconv.ParseFloat(ax.attr("data-x0"), 64)
	x1, _ := strconv.ParseFloat(ax.attr("data-x1"), 64)
	ticks := ax.find(hasClass("tick"))
	if len(ticks) < 2 || strings.TrimSpace(ticks[0].Text) != "0s" {
		t.Fatalf("axis ticks %v: want them to start at 0s", ticks)
	}
	if last := ticks[len(ticks)-1]; strings.TrimSpace(last.Text) != strconv.Itoa(int(rep.Duration.Seconds()))+"s" || !near(mustFloat(t, last.attr("x")), x1) {
		t.Errorf("last tick %q at x=%s, want %s at x=%v (the end of the run)", last.Text, last.attr("x"), rep.Duration, x1)
	}
	dx := (x1 - x0) / float64(n)
	edge := func(i int) float64 { return x0 + dx*float64(i) }
	panels := svg.find(hasClass("panel"))
	if want := 4 + len(rep.SeriesOrder); len(panels) != want {
		t.Errorf("%d panels, want %d", len(panels), want)
	}
	for _, p := range panels {
		id := p.attr("id")
		for _, a := range []string{"data-x0", "data-x1", "data-duration", "data-buckets"} {
			if p.attr(a) != ax.attr(a) {
				t.Errorf("%s: %s=%q, the time axis has %q", id, a, p.attr(a), ax.attr(a))
			}
		}
		for _, l := range p.find(hasClass("line")) {
			pts := points(t, l.attr("points"))
			if len(pts) != n {
				t.Errorf("%s %s: %d points, want one per bucket (%d)", id, l.attr("data-series"), len(pts), n)
				continue
			}
			for i, pt := range pts {
				if !near(pt[0], (edge(i)+edge(i+1))/2) {
					t.Errorf("%s %s: point %d at x=%v, want the middle of bucket %d (%v)", id, l.attr("data-series"), i, pt[0], i, (edge(i)+edge(i+1))/2)
					break
				}
			}
		}
		for _, a := range p.find(hasClass("area")) {
			pts := points(t, a.attr("points"))
			if len(pts) != 4*n {
				t.Errorf("%s %s: %d points, want a step over each of %d buckets", id, a.attr("data-series"), len(pts), n)
				continue
			}
			if !near(pts[0][0], x0) || !near(pts[2*n-1][0], x1) {
				t.Errorf("%s %s: spans x %v..%v, want the whole axis %v..%v", id, a.attr("data-series"), pts[0][0], pts[2*n-1][0], x0, x1)
			}
		}
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return f
}

// heights returns, per bucket, the height of a stacked step area.
func heights(t *testing.T, area *node, n int) []float64 {
	t.Helper()
	pts := points(t, area.attr("points"))
	h := make([]float64, n)
	for i := 0; i < n; i++ {
		top := pts[2*i][1]
		bottom := pts[4*n-1-2*i][1] // the bottom runs right to left
		h[i] = bottom - top
	}
	return h
}

// TestReportOfRedisKill runs the demo with `-redis-fault kill@3.5s:1.5s`
// on its own redis-server and checks the report: one time axis for every
// panel with no partial bucket, local decisions in the source chart during
// the fault window (and none before it), the breaker open in that window,
// markers for the scenario's events and the fault, and captions whose
// numbers are the run's counts. A system test: the kill is real and the
// breaker opens on real time. Its bounds hold on a loaded machine because
// they compare the fault window with the time before it in the same run:
// while the breaker is open every call that asks Redis is decided without
// it however slowly it runs, so most of the window is (at least half,
// and 20 points more than before the kill, when only calls slower than
// the 50 ms budget are).
func TestReportOfRedisKill(t *testing.T) {
	fault, err := demo.ParseFault("kill@3.5s:1.5s")
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	begin := time.Now()
	rep, err := demo.Run(context.Background(), demo.Config{Duration: 6 * time.Second, Fault: &fault, Progress: &progress, SkipCompare: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run took %s; events %+v; notes:\n%s", time.Since(begin).Round(time.Millisecond), rep.Events, strings.Join(rep.Notes, "\n"))
	if !strings.Contains(rep.Store, "redis-server started by the demo at 127.0.0.1:") {
		t.Errorf("store = %q, want the demo's own redis-server on loopback", rep.Store)
	}
	for _, want := range []string{"Redis killed (kill@3.5s:1.5s)", "Redis restarted (empty)"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if strings.Contains(progress.String(), "redis:") || strings.Contains(progress.String(), "WARN") {
		t.Errorf("library or go-redis log lines in the progress output:\n%s", progress.String())
	}
	checkReport(t, rep, false)

	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	svg := timeline(t, page.String())
	checkOneTimeAxis(t, rep, svg)

	// Markers: a lane for each event of the scenario and for the fault, a
	// shaded window across the panels for each that does not span the run.
	ev, ok := rep.Event("fault")
	if !ok {
		t.Fatalf("no fault event in %+v", rep.Events)
	}
	if ev.From < 3500*time.Millisecond || ev.From > 4500*time.Millisecond || ev.To <= ev.From || ev.To > rep.Duration {
		t.Errorf("fault window %s–%s, want it to start at 3.5s", ev.From, ev.To)
	}
	for _, kind := range []string{"surge", "scraper", "brute-force", "fault"} {
		if len(svg.find(func(n *node) bool { return n.attr("id") == "lane-event-"+kind })) != 1 {
			t.Errorf("no lane for the %s event", kind)
		}
	}
	for _, kind := range []string{"surge", "scraper", "fault"} {
		if len(svg.find(func(n *node) bool { return n.attr("class") == "marker" && n.attr("data-event") == kind })) != 1 {
			t.Errorf("no marker across the panels for the %s event", kind)
		}
	}

	// The breaker was open during the fault.
	open := false
	for _, s := range rep.Breaker {
		open = open || (s.State == "open" && s.From < ev.To && s.To > ev.From)
	}
	// It opens after fallback.DefaultFailures store calls fail in a row.
	// Takes are batched, so on a loaded host (slow traffic, big batches)
	// the whole kill can fail fewer calls than that; then the takes of the
	// failed calls are still decided without Redis (checked below), and
	// the breaker rightly stays closed.
	if rep.Fallback == nil {
		t.Fatal("no fallback counters in the report")
	}
	if !open && rep.Fallback.Failures >= fallback.DefaultFailures {
		t.Errorf("breaker never open during the fault %s–%s, with %d store calls failed: %+v", ev.From, ev.To, rep.Fallback.Failures, rep.Breaker)
	}
	if !open {
		t.Logf("breaker stayed closed: %d store calls failed in all, fewer than the %d in a row that open it", rep.Fallback.Failures, fallback.DefaultFailures)
	}

	// The source chart: local decisions in the fault window, none before,
	// drawn as tall as their counts.
	n := rep.Axis.Buckets
	panel := svg.find(func(n *node) bool { return n.attr("id") == "panel-sources" })
	if len(panel) != 1 {
		t.Fatal("no source panel")
	}
	var local *node
	for _, a := range panel[0].find(hasClass("area")) {
		if a.attr("data-series") == "source:"+string(floodgate.SourceLocalFallback) {
			local = a
		}
	}
	if local == nil {
		t.Fatalf("the source chart has no local_fallback area")
	}
	counts := ints(t, local.attr("data-counts"))
	if len(counts) != n || fmt.Sprint(counts) != fmt.Sprint(rep.Sources[floodgate.SourceLocalFallback]) {
		t.Fatalf("local_fallback area counts %v, report %v", counts, rep.Sources[floodgate.SourceLocalFallback])
	}
	h := heights(t, local, n)
	// The area is as tall as its counts: pixels per decision from the
	// fullest bucket, every bucket within the 0.1 px the points are
	// rounded to.
	top := 0
	for i := range counts {
		if counts[i] > counts[top] {
			top = i
		}
	}
	perDecision := h[top] / float64(max(counts[top], 1))
	// inWin counts every decision in the fault window; askedIn and
	// askedBefore count only those of rules that ask Redis on each call
	// (store, cache or a degraded answer in its place), since lease and
	// async rules decide locally whether Redis is up or not, and their
	// share of the traffic is the scenario's, not the fault's.
	inWin, localIn, degradedIn, askedIn := 0, 0, 0, 0
	askedBefore, localBefore := 0, 0
	for i := 0; i < n; i++ {
		if _, to := rep.Axis.Span(i); to <= ev.From {
			localBefore += counts[i]
			askedBefore += asked(rep, i)
		}
		if want := perDecision * float64(counts[i]); math.Abs(h[i]-want) > 0.15+0.002*want {
			t.Errorf("bucket %d: local_fallback area %.1f px tall for %d decisions, want %.1f", i, h[i], counts[i], want)
		}
		if !rep.Axis.InWindow(i, ev.From, ev.To) {
			continue
		}
		localIn += counts[i]
		askedIn += asked(rep, i)
		for _, src := range demo.Sources {
			if c := rep.Sources[src]; c != nil {
				inWin += c[i]
				if src.Degraded() {
					degradedIn += c[i]
				}
			}
		}
	}
	// Before the fault Redis answers, though a call slower than the
	// fallback's 50 ms budget on a loaded machine is decided locally too;
	// in the fault window most of the calls that ask Redis are decided
	// without it: all of them while the breaker is open, none only in the
	// moments before it opens and after Redis is back.
	shareIn, shareBefore := float64(degradedIn)/float64(max(askedIn, 1)), float64(localBefore)/float64(max(askedBefore, 1))
	t.Logf("decided without Redis: %d of %d asking Redis in the fault window (%d decisions in all), %d of %d (local_fallback) before it", degradedIn, askedIn, inWin, localBefore, askedBefore)
	if askedBefore == 0 || localIn == 0 || shareIn < 0.5 || shareIn < shareBefore+0.2 {
		t.Errorf("fault window %s–%s: %d of %d calls asking Redis decided without it (%d local_fallback), before it %d of %d: want most in the window, clearly more than before",
			ev.From, ev.To, degradedIn, askedIn, localIn, localBefore, askedBefore)
	}

	checkCaptions(t, rep, page.String(), inWin, degradedIn)
}

// asked counts bucket i's decisions by rules that ask Redis on each call:
// those Redis answered (store, cache) and those decided in its place.
func asked(rep *demo.Report, i int) int {
	n := 0
	for _, src := range demo.Sources {
		if c := rep.Sources[src]; c != nil && (src == floodgate.SourceStore || src == floodgate.SourceCache || src.Degraded()) {
			n += c[i]
		}
	}
	return n
}

// checkCaptions recomputes the captions' numbers from the report's data.
func checkCaptions(t *testing.T, rep *demo.Report, page string, faultDecisions, faultDegraded int) {
	t.Helper()
	caption := func(id string) string {
		c, ok := rep.Caption(id)
		if !ok {
			t.Fatalf("no %q caption", id)
		}
		if !strings.Contains(html.UnescapeString(page), c.Text) {
			t.Errorf("the page lacks the %s caption %q", id, c.Text)
		}
		return c.Text
	}
	want := func(id, text string, subs ...string) {
		t.Helper()
		for _, s := range subs {
			if !strings.Contains(text, s) {
				t.Errorf("%s caption lacks %q:\n%s", id, s, text)
			}
		}
	}

	// Sources.
	total := 0
	var subs []string
	for _, src := range demo.Sources {
		n := sum(rep.Sources[src])
		total += n
		if n > 0 {
			subs = append(subs, fmt.Sprintf("%s %d (", src, n))
		}
	}
	want("sources", caption("sources"), append(subs, fmt.Sprintf("%d rate-limit decisions:", total))...)
	want("fault", caption("fault"), fmt.Sprintf("%d rate-limit decisions, %d of them", faultDecisions, faultDegraded), "Redis killed at ")

	// Totals: the table, the chart series and the caption agree.
	all, _ := rep.Row("all")
	var offered, shed int
	for _, p := range rep.Series["all"] {
		offered += p.Offered
		shed += p.Shed
	}
	if offered != all.Offered || shed != all.Shed {
		t.Errorf("the chart's series count %d offered, %d shed; the table %d, %d", offered, shed, all.Offered, all.Shed)
	}
	want("shed", caption("shed"), fmt.Sprintf("%d requests offered: %d allowed, %d limited (429, a rate limit), %d shed", all.Offered, all.Allowed, all.Limited, all.Shed))

	// Tiers: what each tier met, and the enterprise tier's shedding
	// explained by priority.
	text := caption("tiers")
	for _, tier := range []string{"free", "pro", "enterprise"} {
		row, _ := rep.Row("tier=" + tier)
		want("tiers", text, fmt.Sprintf("%s: %d offered, %d limited", tier, row.Offered, row.Limited))
		if row.Shed > 0 {
			want("tiers", text, fmt.Sprintf("%d shed (", row.Shed))
		}
		byPriority := 0
		for _, p := range []string{"critical", "write", "read", "test"} {
			c, _ := rep.Row("tier=" + tier + ",priority=" + p)
			byPriority += c.Shed
		}
		if byPriority != row.Shed {
			t.Errorf("tier %s: %d shed, %d by priority", tier, row.Shed, byPriority)
		}
	}
	if ent, _ := rep.Row("tier=enterprise"); ent.Shed > 0 {
		test, _ := rep.Row("tier=enterprise,priority=test")
		want("tiers", text, fmt.Sprintf("shed by priority: test %d", test.Shed))
	}

	// Denials by policy.
	text = caption("denials")
	dTotal := 0
	for p, v := range rep.Denials {
		dTotal += sum(v)
		want("denials", text, fmt.Sprintf("%s %d", p, sum(v)))
	}
	want("denials", text, fmt.Sprintf("%d denials", dTotal))

	// Priorities.
	text = caption("priorities")
	for _, p := range []string{"critical", "write", "read", "test"} {
		row, _ := rep.Row("priority=" + p)
		want("priorities", text, fmt.Sprintf("%s shed %d of %d", p, row.Shed, row.Offered))
	}
	want("latency", caption("latency"), fmt.Sprintf("%d admitted requests", all.Allowed))
}
