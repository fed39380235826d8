package demo

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a demo run produced.
type Report struct {
	Store    string        // "memory" or "redis (redis://...)"
	Duration time.Duration // traffic time
	Rows     []Row         // table rows, grouped
	// Series are per-second offered/allowed points for charts, by name
	// ("tier=free", ..., "priority=test", ...).
	Series map[string][]Point
	// SeriesOrder is the order charts are drawn in.
	SeriesOrder []string
	// Notes are facts the run wants to tell (fallback decisions, errors).
	Notes []string
}

// Row returns the row for group, if present.
func (r *Report) Row(group string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Group == group {
			return row, true
		}
	}
	return Row{}, false
}

// WriteTable prints the rows as an aligned text table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "group\toffered\tallowed\tlimited\tshed\tfailed\tp50\tp99\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", row.Group, row.Offered, row.Allowed,
			row.Limited, row.Shed, row.Failed, fmtDur(row.P50), fmtDur(row.P99))
	}
	return tw.Flush()
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

// chart is one small SVG line chart in the HTML report: one group's
// offered, allowed, limited and shed requests per second, on its own scale.
type chart struct {
	Title   string
	Width   int
	Height  int
	Lines   []line
	XLabels []axisLabel
	YLabels []axisLabel
}

type line struct {
	Name   string
	Color  string
	Points string // SVG polyline points
	Dash   string
}

type axisLabel struct {
	X, Y int
	Text string
}

const (
	chartW, chartH   = 300, 170
	padL, padR, padT = 40, 10, 10
	padB             = 24
)

// lineKinds are the lines of every chart, with their colours.
var lineKinds = []struct {
	name, color, dash string
	get               func(Point) int
}{
	{"offered", "#555555", "4 3", func(p Point) int { return p.Offered }},
	{"allowed", "#2ca02c", "", func(p Point) int { return p.Allowed }},
	{"limited", "#ff7f0e", "", func(p Point) int { return p.Limited }},
	{"shed", "#d62728", "", func(p Point) int { return p.Shed }},
}

func buildChart(title string, pts []Point) chart {
	c := chart{Title: title, Width: chartW, Height: chartH}
	maxY, maxX := 1, max(1, len(pts))
	for _, p := range pts {
		maxY = max(maxY, p.Offered)
	}
	plotW := float64(chartW - padL - padR)
	plotH := float64(chartH - padT - padB)
	x := func(i int) float64 {
		if maxX <= 1 {
			return float64(padL)
		}
		return float64(padL) + plotW*float64(i)/float64(maxX-1)
	}
	y := func(v int) float64 { return float64(padT) + plotH*(1-float64(v)/float64(maxY)) }
	for _, k := range lineKinds {
		var b strings.Builder
		for i, p := range pts {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(x(i), 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y(k.get(p)), 'f', 1, 64))
		}
		c.Lines = append(c.Lines, line{Name: k.name, Color: k.color, Dash: k.dash, Points: b.String()})
	}
	for i := 0; i <= 2; i++ {
		v := maxY * i / 2
		c.YLabels = append(c.YLabels, axisLabel{X: padL - 4, Y: int(y(v)) + 4, Text: strconv.Itoa(v)})
	}
	step := max(1, maxX/5)
	for i := 0; i < maxX; i += step {
		c.XLabels = append(c.XLabels, axisLabel{X: int(x(i)), Y: chartH - 6, Text: strconv.Itoa(i) + "s"})
	}
	return c
}

// WriteHTML writes a self-contained HTML page (inline CSS and SVG, no
// scripts, no external resources) with the table and the charts.
func (r *Report) WriteHTML(w io.Writer) error {
	var tierCharts, prioCharts []chart
	for _, n := range r.SeriesOrder {
		switch {
		case strings.HasPrefix(n, "tier="):
			tierCharts = append(tierCharts, buildChart(strings.TrimPrefix(n, "tier=")+" tier", r.Series[n]))
		case strings.HasPrefix(n, "priority="):
			prioCharts = append(prioCharts, buildChart(strings.TrimPrefix(n, "priority=")+" priority", r.Series[n]))
		}
	}
	data := struct {
		*Report
		Duration string
		Legend   []line
		Sections []section
	}{
		Report:   r,
		Duration: r.Duration.Round(time.Second).String(),
		Sections: []section{
			{"Requests per second by tenant plan tier", "Free tenants hit their plan first; enterprise traffic passes.", tierCharts},
			{"The shedder at work: requests per second by priority", "Under the surge, test traffic is shed first, then reads; critical traffic is never shed.", prioCharts},
		},
	}
	for _, k := range lineKinds {
		data.Legend = append(data.Legend, line{Name: k.name, Color: k.color, Dash: k.dash})
	}
	return reportTmpl.Execute(w, data)
}

type section struct {
	Title, Caption string
	Charts         []chart
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{"dur": fmtDur}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>floodgate demo report</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:70em}
table{border-collapse:collapse;margin:1em 0}th,td{padding:.25em .7em;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child{text-align:left}svg{display:block;background:#fafafa;border:1px solid #ddd}
.grid{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}figcaption{font-weight:600}.legend span{display:inline-block;margin-right:1em}.sw{display:inline-block;width:1em;height:.3em;vertical-align:middle;margin-right:.3em}
</style></head><body>
<h1>floodgate demo report</h1>
<p>Store: <b>{{.Store}}</b>. Traffic for {{.Duration}}.</p>
<table id="summary"><thead><tr><th>group</th><th>offered</th><th>allowed</th><th>limited</th><th>shed</th><th>failed</th><th>p50</th><th>p99</th></tr></thead><tbody>
{{range .Rows}}<tr><td>{{.Group}}</td><td>{{.Offered}}</td><td>{{.Allowed}}</td><td>{{.Limited}}</td><td>{{.Shed}}</td><td>{{.Failed}}</td><td>{{dur .P50}}</td><td>{{dur .P99}}</td></tr>
{{end}}</tbody></table>
<div class="legend">{{range .Legend}}<span><i class="sw" style="background:{{.Color}}"></i>{{.Name}}{{if .Dash}} (dashed){{end}}</span>{{end}}</div>
{{range .Sections}}<h2>{{.Title}}</h2><p>{{.Caption}}</p><div class="grid">
{{range .Charts}}<figure><figcaption>{{.Title}}</figcaption>
<svg width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Title}}">
{{range .YLabels}}<text x="{{.X}}" y="{{.Y}}" font-size="10" text-anchor="end">{{.Text}}</text>{{end}}
{{range .XLabels}}<text x="{{.X}}" y="{{.Y}}" font-size="10" text-anchor="middle">{{.Text}}</text>{{end}}
{{range .Lines}}<polyline fill="none" stroke="{{.Color}}" stroke-width="1.6"{{if .Dash}} stroke-dasharray="{{.Dash}}"{{end}} points="{{.Points}}"><title>{{.Name}}</title></polyline>
{{end}}</svg></figure>
{{end}}</div>
{{end}}
{{if .Notes}}<h2>Notes</h2><ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
</body></html>
`))
