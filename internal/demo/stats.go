package demo

import (
	"slices"
	"sync"
	"time"
)

// Outcome is how one demo request ended, as the client saw it.
type Outcome uint8

// Outcomes.
const (
	Allowed Outcome = iota // 2xx
	Limited                // 429 / RESOURCE_EXHAUSTED
	Shed                   // 503 / UNAVAILABLE
	Failed                 // anything else: transport errors, 5xx other than 503
	numOutcomes
)

// Row is one line of the report table: what a group of requests met.
type Row struct {
	Group   string // e.g. "tier=free", "priority=critical", "scenario=attack"
	Offered int
	Allowed int
	Limited int
	Shed    int
	Failed  int
	P50     time.Duration
	P99     time.Duration
}

// Balanced reports whether every offered request is accounted for.
func (r Row) Balanced() bool { return r.Offered == r.Allowed+r.Limited+r.Shed+r.Failed }

// maxSamples bounds the latency samples kept per group (reservoir-free:
// the demo's traffic is bounded, and beyond this many samples quantiles are
// taken over the first maxSamples).
const maxSamples = 200_000

type group struct {
	counts  [numOutcomes]int
	samples []time.Duration
}

// Stats collects outcomes by group and per-second series. It is safe for
// concurrent use.
type Stats struct {
	mu     sync.Mutex
	start  time.Time
	groups map[string]*group
	order  []string
	series map[string][]Point // name -> per-second points
}

// Point is one second of one series.
type Point struct {
	Offered int
	Allowed int
	Limited int
	Shed    int
}

// NewStats returns an empty collector whose series count seconds from start.
func NewStats(start time.Time) *Stats {
	return &Stats{start: start, groups: map[string]*group{}, series: map[string][]Point{}}
}

// Record counts one request that ended with o after lat, under every group
// in groups, and in the per-second series named by series.
func (s *Stats) Record(at time.Time, lat time.Duration, o Outcome, groups []string, series []string) {
	sec := int(at.Sub(s.start) / time.Second)
	if sec < 0 {
		sec = 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range groups {
		g := s.groups[name]
		if g == nil {
			g = &group{}
			s.groups[name] = g
			s.order = append(s.order, name)
		}
		g.counts[o]++
		if len(g.samples) < maxSamples {
			g.samples = append(g.samples, lat)
		}
	}
	for _, name := range series {
		pts := s.series[name]
		for len(pts) <= sec {
			pts = append(pts, Point{})
		}
		p := &pts[sec]
		p.Offered++
		switch o {
		case Allowed:
			p.Allowed++
		case Limited:
			p.Limited++
		case Shed:
			p.Shed++
		}
		s.series[name] = pts
	}
}

// Rows returns one Row per group, in the order groups were first seen
// unless order names them.
func (s *Stats) Rows(order []string) []Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Clone(order)
	for _, n := range s.order {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	rows := make([]Row, 0, len(names))
	for _, n := range names {
		g := s.groups[n]
		if g == nil {
			continue
		}
		r := Row{Group: n, Allowed: g.counts[Allowed], Limited: g.counts[Limited], Shed: g.counts[Shed], Failed: g.counts[Failed]}
		r.Offered = r.Allowed + r.Limited + r.Shed + r.Failed
		r.P50, r.P99 = quantiles(g.samples)
		rows = append(rows, r)
	}
	return rows
}

// Series returns a copy of the named per-second series.
func (s *Stats) Series(name string) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.series[name])
}

func quantiles(samples []time.Duration) (p50, p99 time.Duration) {
	if len(samples) == 0 {
		return 0, 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return sorted[rank(len(sorted), 50)], sorted[rank(len(sorted), 99)]
}

// rank is the nearest-rank index of the q-th percentile of n samples.
func rank(n, q int) int {
	i := (q*n + 99) / 100 // ceil(q*n/100)
	if i < 1 {
		i = 1
	}
	return i - 1
}
