package demo

import (
	"cmp"
	"fmt"
	"html"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The timeline is one SVG: lanes for the scenario's events and the
// breaker's state, then panels, all drawn on one x scale (plot from svgX0
// to svgX1 for offsets 0 to the run's duration), with one time axis at the
// bottom. Series are drawn bucket by bucket: stacked areas as steps over
// each bucket's span, lines through each bucket's middle; every panel has
// exactly Axis.Buckets buckets, so none is partial.
const (
	svgW      = 1000
	svgX0     = 170 // left edge of the plot; lane labels and y labels sit left of it
	svgX1     = 885 // right edge of the plot; legends sit right of it
	laneH     = 14
	laneGap   = 4
	titleH    = 18
	panelGap  = 12
	axisH     = 28
	bigPanelH = 96
	smallH    = 62
)

// Colours of the decision sources, outcomes, breaker states and events.
var (
	sourceColor = map[floodgate.Source]string{
		floodgate.SourceStore: "#1f77b4", floodgate.SourceCache: "#9ecae1",
		floodgate.SourceLease: "#6a51a3", floodgate.SourceAsync: "#bcbddc",
		floodgate.SourceLocalFallback: "#ff7f0e", floodgate.SourceFailOpen: "#e377c2",
		floodgate.SourceFailClosed: "#d62728",
	}
	breakerColor = map[string]string{"closed": "#a1d99b", "half-open": "#fdd835", "open": "#d62728"}
	eventColor   = map[string]string{"surge": "#6baed6", "scraper": "#fdae6b", "brute-force": "#bdbdbd", "fault": "#d62728"}
	// policyPalette colours the denial policies in order of their totals;
	// the shedder is always red.
	policyPalette = []string{"#ff7f0e", "#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"}
)

type svgBuilder struct {
	b    strings.Builder
	axis Axis
	dur  time.Duration
	y    int // next free y
}

// x maps an offset from the start of traffic to the plot.
func (s *svgBuilder) x(off time.Duration) float64 {
	return svgX0 + float64(svgX1-svgX0)*off.Seconds()/s.dur.Seconds()
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func esc(s string) string { return html.EscapeString(s) }

func (s *svgBuilder) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

// timelineSVG draws the report's timeline.
func (r *Report) timelineSVG() string {
	s := &svgBuilder{axis: r.Axis, dur: r.Duration, y: 8}
	if s.axis.Buckets == 0 || s.dur <= 0 {
		return ""
	}
	// Lanes: events, then the breaker.
	laneTop := s.y
	for _, e := range r.Events {
		s.lane(e.Name, "event-"+e.Kind, []laneSpan{{e.From, e.To, eventColor[e.Kind], e.Name, ""}})
	}
	if r.Breaker != nil {
		var spans []laneSpan
		for _, sp := range r.Breaker {
			spans = append(spans, laneSpan{sp.From, sp.To, breakerColor[sp.State], "breaker " + sp.State, sp.State})
		}
		s.lane("Redis circuit breaker", "breaker", spans)
	} else {
		s.lane("Redis circuit breaker (no Redis)", "breaker", nil)
	}
	s.y += panelGap

	// Panels.
	var srcKeys []string
	var srcSeries [][]int
	var srcColors []string
	for _, src := range Sources {
		if v := r.Sources[src]; sum(v) > 0 {
			srcKeys, srcSeries, srcColors = append(srcKeys, string(src)), append(srcSeries, v), append(srcColors, sourceColor[src])
		}
	}
	s.stacked("sources", "Rate-limit decisions per second, by where they were made", bigPanelH, "source:", srcKeys, srcSeries, srcColors)

	all := r.Series["all"]
	s.lines("outcomes", "All requests per second: offered, allowed, limited (429), shed (503)", bigPanelH, pointLines(all), "/s")

	pols := make([]string, 0, len(r.Denials))
	for p := range r.Denials {
		pols = append(pols, p)
	}
	slices.SortFunc(pols, func(a, b string) int {
		return cmp.Or(cmp.Compare(sum(r.Denials[b]), sum(r.Denials[a])), cmp.Compare(a, b))
	})
	var polSeries [][]int
	var polColors []string
	pi := 0
	for _, p := range pols {
		polSeries = append(polSeries, r.Denials[p])
		if p == "shedder" {
			polColors = append(polColors, "#d62728")
			continue
		}
		polColors = append(polColors, policyPalette[pi%len(policyPalette)])
		pi++
	}
	s.stacked("denials", "Denials per second, by policy", bigPanelH, "policy:", pols, polSeries, polColors)

	p50, p99 := make([]float64, len(r.Latency)), make([]float64, len(r.Latency))
	for i, l := range r.Latency {
		p50[i], p99[i] = l.P50.Seconds()*1000, l.P99.Seconds()*1000
	}
	s.lines("latency", "Latency of admitted requests (ms): p50 and p99", bigPanelH, []seriesLine{
		{"p50", "#2ca02c", "", p50, nil}, {"p99", "#9467bd", "", p99, nil},
	}, "ms")

	for _, n := range r.SeriesOrder {
		kind, name, _ := strings.Cut(n, "=")
		s.lines("series-"+kind+"-"+name, name+" "+kind+": requests per second", smallH, pointLines(r.Series[n]), "/s")
	}
	panelsBottom := s.y - panelGap

	// One time axis for every panel, with gridlines through all of them and
	// the event windows shaded across all of them.
	s.printf(`<g class="x-axis" data-x0="%d" data-x1="%d" data-duration="%s" data-buckets="%d">`, svgX0, svgX1, fmtSec(s.dur), s.axis.Buckets)
	for _, t := range s.ticks() {
		x := f1(s.x(t))
		s.printf(`<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#333"/>`, x, panelsBottom, x, panelsBottom+4)
		s.printf(`<text class="tick" x="%s" y="%d" font-size="10" text-anchor="middle">%s</text>`, x, panelsBottom+14, fmtSec(t))
	}
	s.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, svgX0, panelsBottom, svgX1, panelsBottom)
	s.printf(`<text x="%d" y="%d" font-size="10" text-anchor="middle">time since the start of traffic</text></g>`, (svgX0+svgX1)/2, panelsBottom+26)
	for _, e := range r.Events {
		if e.From <= 0 && e.To >= s.dur {
			continue // a whole-run event is its lane only
		}
		x0, x1 := s.x(e.From), s.x(e.To)
		s.printf(`<rect class="marker" data-event="%s" x="%s" y="%d" width="%s" height="%d" fill="%s" fill-opacity="0.08" stroke="%s" stroke-opacity="0.5" stroke-dasharray="3 3"/>`,
			esc(e.Kind), f1(x0), laneTop, f1(x1-x0), panelsBottom-laneTop, eventColor[e.Kind], eventColor[e.Kind])
	}
	height := panelsBottom + axisH + 6
	return fmt.Sprintf(`<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="timeline of the run" font-family="system-ui,sans-serif">`,
		svgW, height, svgW, height) + s.b.String() + "</svg>"
}

// ticks are the offsets the time axis labels and every panel's gridlines
// mark: round steps from 0 to the end of the run, the end included.
func (s *svgBuilder) ticks() []time.Duration {
	step := 5 * time.Minute
	for _, st := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute} {
		if s.dur/st <= 12 {
			step = st
			break
		}
	}
	var out []time.Duration
	for t := time.Duration(0); t < s.dur; t += step {
		out = append(out, t)
	}
	if len(out) > 0 && s.dur-out[len(out)-1] < step/2 {
		out = out[:len(out)-1] // the end's label would overlap the last round one
	}
	return append(out, s.dur)
}

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

type laneSpan struct {
	from, to     time.Duration
	color        string
	title, label string // tooltip; text drawn in the bar where it fits
}

func (s *svgBuilder) lane(label, id string, spans []laneSpan) {
	s.printf(`<g class="lane" id="lane-%s"><text x="%d" y="%d" font-size="10" text-anchor="end">%s</text>`, esc(id), svgX0-8, s.y+laneH-3, esc(label))
	s.printf(`<rect x="%d" y="%d" width="%d" height="%d" fill="#f4f4f4"/>`, svgX0, s.y, svgX1-svgX0, laneH)
	for _, sp := range spans {
		x0, x1 := s.x(sp.from), s.x(sp.to)
		s.printf(`<rect x="%s" y="%d" width="%s" height="%d" fill="%s" data-from="%s" data-to="%s"><title>%s</title></rect>`,
			f1(x0), s.y, f1(max(x1-x0, 1)), laneH, sp.color, fmtSec(sp.from), fmtSec(sp.to), esc(sp.title+" "+fmtSec(sp.from)+"–"+fmtSec(sp.to)))
		if text := strings.TrimSpace(sp.label + " " + fmtSec(sp.from) + "–" + fmtSec(sp.to)); x1-x0 > 5.5*float64(len(text)) {
			s.printf(`<text x="%s" y="%d" font-size="9">%s</text>`, f1(x0+3), s.y+laneH-4, esc(text))
		} else if x1-x0 > 5.5*float64(len(sp.label)) {
			s.printf(`<text x="%s" y="%d" font-size="9">%s</text>`, f1(x0+3), s.y+laneH-4, esc(sp.label))
		}
	}
	s.printf(`</g>`)
	s.y += laneH + laneGap
}

// panel opens a panel's group and draws its frame and title; it returns
// the plot's top and bottom.
func (s *svgBuilder) panel(id, title string, h int) (top, bottom int) {
	s.printf(`<g class="panel" id="panel-%s" data-x0="%d" data-x1="%d" data-duration="%s" data-buckets="%d">`, esc(id), svgX0, svgX1, fmtSec(s.dur), s.axis.Buckets)
	s.printf(`<text x="%d" y="%d" font-size="12" font-weight="600">%s</text>`, svgX0, s.y+12, esc(title))
	top = s.y + titleH
	bottom = top + h
	s.printf(`<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#ddd"/>`, svgX0, top, svgX1-svgX0, h)
	for _, t := range s.ticks() {
		x := f1(s.x(t))
		s.printf(`<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#e6e6e6"/>`, x, top, x, bottom)
	}
	s.y = bottom + panelGap
	return top, bottom
}

func (s *svgBuilder) yLabels(top, bottom int, maxV float64, unit string) {
	for _, f := range []float64{0, 0.5, 1} {
		y := float64(bottom) - f*float64(bottom-top)
		s.printf(`<text x="%d" y="%s" font-size="9" text-anchor="end" fill="#555">%s</text>`, svgX0-4, f1(y+3), fmtNum(f*maxV)+unit)
	}
}

func (s *svgBuilder) legend(top int, names, colors []string) {
	for i, n := range names {
		y := top + 4 + i*12
		s.printf(`<rect x="%d" y="%d" width="10" height="8" fill="%s"/><text x="%d" y="%d" font-size="9">%s</text>`, svgX1+6, y, colors[i], svgX1+20, y+8, esc(n))
	}
}

func fmtNum(v float64) string {
	switch {
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v == 0:
		return "0"
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

// stacked draws per-bucket counts as stacked step areas, in requests per
// second.
func (s *svgBuilder) stacked(id, title string, h int, prefix string, keys []string, series [][]int, colors []string) {
	top, bottom := s.panel(id, title, h)
	perSec := 1 / s.axis.Width.Seconds()
	totals := make([]float64, s.axis.Buckets)
	for _, v := range series {
		for i, c := range v {
			totals[i] += float64(c) * perSec
		}
	}
	maxV := max(slices.Max(append(totals, 1)), 1)
	y := func(v float64) float64 { return float64(bottom) - v/maxV*float64(bottom-top) }
	base := make([]float64, s.axis.Buckets)
	for k, v := range series {
		var up, down []string
		for i := 0; i < s.axis.Buckets; i++ {
			lo, hi := s.axis.Span(i)
			topV := base[i] + float64(v[i])*perSec
			up = append(up, f1(s.x(lo))+","+f1(y(topV)), f1(s.x(hi))+","+f1(y(topV)))
			down = append(down, f1(s.x(lo))+","+f1(y(base[i])), f1(s.x(hi))+","+f1(y(base[i]))) // reversed below
			base[i] = topV
		}
		slices.Reverse(down)
		s.printf(`<polygon class="area" data-series="%s" data-counts="%s" fill="%s" fill-opacity="0.85" points="%s"><title>%s</title></polygon>`,
			esc(prefix+keys[k]), joinInts(v), colors[k], strings.Join(up, " ")+" "+strings.Join(down, " "), esc(keys[k]))
	}
	if len(series) == 0 {
		s.printf(`<text x="%d" y="%d" font-size="11" fill="#777" text-anchor="middle">none</text>`, (svgX0+svgX1)/2, (top+bottom)/2)
	}
	s.yLabels(top, bottom, maxV, "")
	s.legend(top, keys, colors)
	s.printf(`</g>`)
}

type seriesLine struct {
	name, color, dash string
	values            []float64 // per bucket, already in the panel's unit
	counts            []int     // per bucket counts behind values, if any
}

// pointLines are the offered/allowed/limited/shed lines of a series, in
// requests per second.
func pointLines(pts []Point) []seriesLine {
	kinds := []struct {
		name, color, dash string
		get               func(Point) int
	}{
		{"offered", "#555555", "4 3", func(p Point) int { return p.Offered }},
		{"allowed", "#2ca02c", "", func(p Point) int { return p.Allowed }},
		{"limited", "#ff7f0e", "", func(p Point) int { return p.Limited }},
		{"shed", "#d62728", "", func(p Point) int { return p.Shed }},
	}
	out := make([]seriesLine, 0, len(kinds))
	for _, k := range kinds {
		l := seriesLine{name: k.name, color: k.color, dash: k.dash}
		for _, p := range pts {
			l.counts = append(l.counts, k.get(p))
		}
		out = append(out, l)
	}
	return out
}

// lines draws one polyline per series through the middle of each bucket.
// Series with counts are converted to requests per second.
func (s *svgBuilder) lines(id, title string, h int, ls []seriesLine, unit string) {
	top, bottom := s.panel(id, title, h)
	perSec := 1 / s.axis.Width.Seconds()
	maxV := 1.0
	for i := range ls {
		if ls[i].counts != nil {
			ls[i].values = make([]float64, len(ls[i].counts))
			for j, c := range ls[i].counts {
				ls[i].values[j] = float64(c) * perSec
			}
		}
		for _, v := range ls[i].values {
			maxV = max(maxV, v)
		}
	}
	y := func(v float64) float64 { return float64(bottom) - v/maxV*float64(bottom-top) }
	var names, colors []string
	for _, l := range ls {
		var pts []string
		for i := 0; i < s.axis.Buckets && i < len(l.values); i++ {
			lo, hi := s.axis.Span(i)
			pts = append(pts, f1(s.x(lo+(hi-lo)/2))+","+f1(y(l.values[i])))
		}
		dash := ""
		if l.dash != "" {
			dash = ` stroke-dasharray="` + l.dash + `"`
		}
		counts := ""
		if l.counts != nil {
			counts = ` data-counts="` + joinInts(l.counts) + `"`
		}
		s.printf(`<polyline class="line" data-series="%s"%s fill="none" stroke="%s" stroke-width="1.6"%s points="%s"><title>%s</title></polyline>`,
			esc(l.name), counts, l.color, dash, strings.Join(pts, " "), esc(l.name))
		names, colors = append(names, l.name), append(colors, l.color)
	}
	s.yLabels(top, bottom, maxV, unit)
	s.legend(top, names, colors)
	s.printf(`</g>`)
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}
