package demo

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
)

// Report is what a demo run produced. Every per-bucket slice has one entry
// per bucket of Axis.
type Report struct {
	Store    string        // where rate-limit state was kept, for people
	Duration time.Duration // traffic time
	// Axis is the time axis every series and chart shares.
	Axis Axis
	Rows []Row // table rows, grouped
	// Cross are the rows of tenant traffic by tier and priority
	// ("tier=enterprise,priority=read"), which the captions explain
	// shedding with.
	Cross []Row
	// Series are per-bucket offered/allowed/limited/shed points by name:
	// "all", "tier=free", ..., "priority=test", ...
	Series map[string][]Point
	// SeriesOrder is the order the tier and priority charts are drawn in.
	SeriesOrder []string
	// Sources counts the rate-limit stage's decisions per bucket by where
	// they were made (store, cache, lease, async, local_fallback,
	// fail_open, fail_closed).
	Sources map[floodgate.Source][]int
	// Denials counts every stage's denials per bucket by policy (rule
	// name, "shedder", a concurrency cap's name).
	Denials map[string][]int
	// Latency is p50/p99 of the admitted requests that started in each
	// bucket; Admitted is the same over the whole run.
	Latency  []LatencyPoint
	Admitted LatencyPoint
	// Breaker is the Redis circuit breaker's state over the run; nil when
	// the run had no Redis.
	Breaker []BreakerSpan
	// Fallback is the Redis fallback's counters at the end of the run;
	// nil when the run had no Redis.
	Fallback *fallback.Stats
	// Events are the scenario's events and the Redis fault, if any.
	Events []Event
	// Fault is the Redis fault the run injected, if any.
	Fault *Fault
	// Notes are facts the run wants to tell (fallback decisions, errors).
	Notes []string
	// Compare is the overload comparison; nil when the run
	// left it out.
	Compare *Comparison
}

// Row returns the row for group, if present.
func (r *Report) Row(group string) (Row, bool) {
	for _, rows := range [][]Row{r.Rows, r.Cross} {
		for _, row := range rows {
			if row.Group == group {
				return row, true
			}
		}
	}
	return Row{}, false
}

// Event returns the first event of kind, if present.
func (r *Report) Event(kind string) (Event, bool) {
	for _, e := range r.Events {
		if e.Kind == kind {
			return e, true
		}
	}
	return Event{}, false
}

// InWindow reports whether bucket i counts as inside [from, to): its
// middle is.
func (a Axis) InWindow(i int, from, to time.Duration) bool {
	lo, hi := a.Span(i)
	mid := lo + (hi-lo)/2
	return mid >= from && mid < to
}

// WriteTable prints the rows as an aligned text table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "group\toffered\tallowed\tlimited\tshed\tfailed\tp50\tp99\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", row.Group, row.Offered, row.Allowed,
			row.Limited, row.Shed, row.Failed, fmtDur(row.P50), fmtDur(row.P99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Compare != nil {
		return r.Compare.writeText(w)
	}
	return nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	default:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	}
}

// fmtSec formats an offset in seconds with at most one decimal: "8s",
// "7.5s".
func fmtSec(d time.Duration) string {
	return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', -1, 64) + "s"
}

// WriteHTML writes a self-contained HTML page (inline CSS and SVG, no
// scripts, no external resources): one timeline SVG whose panels share a
// single time axis, what the run shows in words, the table and the notes.
func (r *Report) WriteHTML(w io.Writer) error {
	data := struct {
		*Report
		Duration string
		Captions []Caption
		Timeline template.HTML
		Overload template.HTML
	}{
		Report:   r,
		Duration: fmtSec(r.Duration),
		Captions: r.Captions(),
		Timeline: template.HTML(r.timelineSVG()), // built with every text escaped
	}
	if r.Compare != nil {
		data.Overload = template.HTML(r.Compare.svg()) // every text escaped
	}
	return reportTmpl.Execute(w, data)
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{"dur": fmtDur, "pct100": func(v float64) float64 { return 100 * v }}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>floodgate demo report</title>
<link rel="icon" href="data:,">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em 2em;color:#222;max-width:64em}
h1{margin:.2em 0}h2{margin:1.2em 0 .4em;font-size:1.15em}
table{border-collapse:collapse;margin:.5em 0}th,td{padding:.2em .7em;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child{text-align:left}
svg{display:block;background:#fff;border:1px solid #ddd}
dl.captions{margin:.4em 0}dl.captions dt{font-weight:600;margin-top:.35em}dl.captions dd{margin:0 0 0 1.2em}
</style></head><body>
<h1>floodgate demo report</h1>
<p>Store: <b>{{.Store}}</b>. Traffic for {{.Duration}}{{with .Fault}}, Redis fault <b>{{.}}</b>{{end}}. Every chart below shares one time axis: {{.Axis.Buckets}} buckets of {{dur .Axis.Width}}, rates in requests per second.</p>
{{.Timeline}}
<h2>What this run shows</h2>
<dl class="captions" id="captions">{{range .Captions}}<dt>{{.Title}}</dt><dd data-caption="{{.ID}}">{{.Text}}</dd>
{{end}}</dl>
<h2>Totals by group</h2>
<table id="summary"><thead><tr><th>group</th><th>offered</th><th>allowed</th><th>limited</th><th>shed</th><th>failed</th><th>p50</th><th>p99</th></tr></thead><tbody>
{{range .Rows}}<tr><td>{{.Group}}</td><td>{{.Offered}}</td><td>{{.Allowed}}</td><td>{{.Limited}}</td><td>{{.Shed}}</td><td>{{.Failed}}</td><td>{{dur .P50}}</td><td>{{dur .P99}}</td></tr>
{{end}}</tbody></table>
{{with .Compare}}<h2>Fixed and adaptive capacity under overload</h2>
<p>{{.Service}}, offered {{printf "%.0f" .Offered}} calls/s, 10% critical; the first {{dur .Warmup}} of each run is left out of the counts.</p>
<table id="overload"><thead><tr><th>stage</th><th>goodput/s</th><th>critical served</th><th>critical p99</th><th>p99</th><th>refused</th><th>critical refused</th><th>late</th></tr></thead><tbody>
{{range .Runs}}<tr><td>{{.Name}}</td><td>{{printf "%.0f" .Goodput}}</td><td>{{printf "%.2f%%" (pct100 .CriticalServed)}}</td><td>{{dur .CriticalP99}}</td><td>{{dur .P99}}</td><td>{{.Refused}}</td><td>{{.CriticalRefused}}</td><td>{{.Late}}</td></tr>
{{end}}</tbody></table>
{{end}}{{.Overload}}
{{if .Notes}}<h2>Notes</h2><ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
</body></html>
`))
