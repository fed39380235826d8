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

// maxBucketSamples bounds the admitted-latency samples kept per time bucket.
const maxBucketSamples = 50_000

type group struct {
	counts  [numOutcomes]int
	samples []time.Duration
}

// Axis is the time axis every series and chart of a run shares: n buckets
// of equal width that together cover the run exactly, so there is no
// partial last bucket.
type Axis struct {
	Buckets int           // number of buckets
	Width   time.Duration // width of one bucket
}

// axisFor returns the axis of a run of length d: half-second buckets (at
// most 120 of them), their width adjusted so that they divide d exactly.
func axisFor(d time.Duration) Axis {
	n := int((d + 250*time.Millisecond) / (500 * time.Millisecond))
	n = min(max(n, 1), 120)
	return Axis{Buckets: n, Width: d / time.Duration(n)}
}

// Index returns the bucket of an offset from the start of the run, clamped
// to the axis (the last bucket takes the nanoseconds d/n rounded off).
func (a Axis) Index(off time.Duration) int {
	if off < 0 {
		return 0
	}
	return min(int(off/a.Width), a.Buckets-1)
}

// Span returns the offsets [from, to) that bucket i covers.
func (a Axis) Span(i int) (from, to time.Duration) {
	return time.Duration(i) * a.Width, time.Duration(i+1) * a.Width
}

// Stats collects outcomes by group, per-bucket series and the latency of
// admitted requests per bucket. It is safe for concurrent use.
type Stats struct {
	mu       sync.Mutex
	start    time.Time
	axis     Axis
	groups   map[string]*group
	series   map[string][]Point // name -> per-bucket points
	admitted [][]time.Duration  // per bucket: latencies of admitted requests
}

// Point is one time bucket of one series: requests that started in it.
type Point struct {
	Offered int
	Allowed int
	Limited int
	Shed    int
}

// NewStats returns an empty collector whose series have one Point per
// bucket of axis, counted from start.
func NewStats(start time.Time, axis Axis) *Stats {
	return &Stats{start: start, axis: axis, groups: map[string]*group{}, series: map[string][]Point{},
		admitted: make([][]time.Duration, axis.Buckets)}
}

// Record counts one request that started at at and ended with o after lat,
// under every group in groups, and in the per-bucket series named by
// series.
func (s *Stats) Record(at time.Time, lat time.Duration, o Outcome, groups []string, series []string) {
	b := s.axis.Index(at.Sub(s.start))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range groups {
		g := s.groups[name]
		if g == nil {
			g = &group{}
			s.groups[name] = g
		}
		g.counts[o]++
		if len(g.samples) < maxSamples {
			g.samples = append(g.samples, lat)
		}
	}
	for _, name := range series {
		pts := s.series[name]
		if pts == nil {
			pts = make([]Point, s.axis.Buckets)
			s.series[name] = pts
		}
		p := &pts[b]
		p.Offered++
		switch o {
		case Allowed:
			p.Allowed++
		case Limited:
			p.Limited++
		case Shed:
			p.Shed++
		}
	}
	if o == Allowed && len(s.admitted[b]) < maxBucketSamples {
		s.admitted[b] = append(s.admitted[b], lat)
	}
}

// Rows returns one Row for each group in names that saw traffic, in that
// order.
func (s *Stats) Rows(names []string) []Row {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// Series returns a copy of the named per-bucket series: one Point per
// bucket of the axis, zero where nothing was offered.
func (s *Stats) Series(name string) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pts := s.series[name]; pts != nil {
		return slices.Clone(pts)
	}
	return make([]Point, s.axis.Buckets)
}

// Latency returns p50 and p99 of the admitted requests that started in
// each bucket (zero where none was admitted), and over the whole run.
func (s *Stats) Latency() (perBucket []LatencyPoint, all LatencyPoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	perBucket = make([]LatencyPoint, len(s.admitted))
	var every []time.Duration
	for i, samples := range s.admitted {
		p50, p99 := quantiles(samples)
		perBucket[i] = LatencyPoint{Count: len(samples), P50: p50, P99: p99}
		every = append(every, samples...)
	}
	p50, p99 := quantiles(every)
	return perBucket, LatencyPoint{Count: len(every), P50: p50, P99: p99}
}

// LatencyPoint is the latency of the admitted requests of one bucket (or
// of the run): how many there were, and their p50 and p99.
type LatencyPoint struct {
	Count    int
	P50, P99 time.Duration
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
