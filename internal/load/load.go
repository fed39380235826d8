// Package load measures how loaded this instance is, for load reports
// to the clients' balancers (package guard sends them as ORCA reports):
// the utilisation of the stages that hold requests in flight, the
// requests per second the chain sees and the ones it refuses for
// overload.
//
// What it decides:
//
//   - utilisation is a stage's requests in flight over what it holds
//     them against (the shedder's capacity, the in-flight limiter's
//     cap, the adaptive limit), and the instance's is the largest of
//     its stages': the stage nearest to refusing binds;
//   - it is sampled at each arrival, before the request is admitted,
//     and averaged over a window (what arrivals see is what the
//     balancer sends more of), so one report is not one instant's
//     noise;
//   - a window closes when a report is asked for and the window has
//     lasted at least MinWindow with at least MinArrivals arrivals, or
//     MaxWindow whatever its arrivals: a busy service's reports follow
//     it within a tenth of a second, a quiet one's still mean something;
//     a report between closes repeats the last closed window (before the
//     first, the window so far), so reports cost no more than reading it;
//   - QPS counts every arrival (admitted or refused), EPS the refusals
//     the caller says are for overload (the shedders' and the in-flight
//     limiters'), both per second of the window.
//
// It knows no transport and no stage: a Source is two functions.
package load

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Window bounds (see the package doc).
const (
	MinWindow   = 100 * time.Millisecond
	MinArrivals = 100
	MaxWindow   = time.Second
)

// MaxSources is how many Sources a Meter reads.
const MaxSources = 4

// scale is the fixed point of the utilisation sums: millionths.
const scale = 1e6

// Source is one stage's load: its requests in flight and the number it
// holds them against (a limit of 0 or less reads as no load).
type Source struct {
	Name     string
	InFlight func() int64
	Limit    func() int64
}

// Report is one window's load.
type Report struct {
	// Utilization is the mean, over the window's arrivals, of the
	// largest of the Sources' in flight over limit; with no arrival, the
	// largest now.
	Utilization float64
	// Stage names the Source whose mean utilisation was the largest.
	Stage string
	// QPS is the arrivals per second, EPS the refusals for overload per
	// second.
	QPS, EPS float64
	// Window is how long the window lasted; Arrivals and Refused are its
	// counts.
	Window            time.Duration
	Arrivals, Refused int64
}

// Meter is the load of one instance. It is safe for concurrent use:
// Arrive and Refuse are atomic additions, Report takes a lock only to
// close a window.
type Meter struct {
	sources  []Source
	clock    floodgate.Clock
	onWindow func(Report)

	arrivals atomic.Int64
	refused  atomic.Int64
	maxSum   atomic.Int64
	sums     [MaxSources]atomic.Int64

	start atomic.Int64 // unix nanoseconds the window opened
	mu    sync.Mutex   // closes a window
	last  atomic.Pointer[Report]
}

// New returns a Meter of sources (1 to MaxSources, each with both
// functions), reading time from clock. onWindow, if not nil, is called
// with each window as it closes, under the Meter's lock.
func New(clock floodgate.Clock, onWindow func(Report), sources ...Source) *Meter {
	if len(sources) == 0 || len(sources) > MaxSources {
		panic("load: 1 to 4 sources")
	}
	for _, s := range sources {
		if s.InFlight == nil || s.Limit == nil {
			panic("load: source " + s.Name + " without InFlight or Limit")
		}
	}
	m := &Meter{sources: sources, clock: clock, onWindow: onWindow}
	m.start.Store(clock.Now().UnixNano())
	return m
}

// utilizations fills u with each source's utilisation now and returns
// the largest and its index.
func (m *Meter) utilizations(u *[MaxSources]float64) (float64, int) {
	top, at := 0.0, 0
	for i, s := range m.sources {
		if l := s.Limit(); l > 0 {
			u[i] = float64(s.InFlight()) / float64(l)
		}
		if u[i] > top {
			top, at = u[i], i
		}
	}
	return top, at
}

// Arrive counts one arrival and samples the utilisation it sees.
func (m *Meter) Arrive() {
	var u [MaxSources]float64
	top, _ := m.utilizations(&u)
	for i := range m.sources {
		m.sums[i].Add(fixed(u[i]))
	}
	m.maxSum.Add(fixed(top))
	m.arrivals.Add(1)
}

// fixed is u in millionths, rounded: 0.7 is 700000, not 699999.
func fixed(u float64) int64 { return int64(math.Round(u * scale)) }

// Refuse counts one arrival refused for overload.
func (m *Meter) Refuse() { m.refused.Add(1) }

// Report returns the last closed window, closing the open one first if
// it is due (see the package doc).
func (m *Meter) Report() Report {
	now := m.clock.Now()
	elapsed := time.Duration(now.UnixNano() - m.start.Load())
	if elapsed >= MaxWindow || elapsed >= MinWindow && m.arrivals.Load() >= MinArrivals {
		if m.mu.TryLock() {
			r, closed := m.close(now)
			m.mu.Unlock()
			if closed {
				return r
			}
		}
	}
	if r := m.last.Load(); r != nil {
		return *r
	}
	return m.peek(now)
}

// close ends the window at now, under mu: another Report may have closed
// it since it was found due.
func (m *Meter) close(now time.Time) (Report, bool) {
	elapsed := time.Duration(now.UnixNano() - m.start.Load())
	if elapsed < MinWindow || elapsed < MaxWindow && m.arrivals.Load() < MinArrivals {
		return Report{}, false
	}
	m.start.Store(now.UnixNano())
	var sums [MaxSources]int64
	for i := range m.sources {
		sums[i] = m.sums[i].Swap(0)
	}
	r := m.report(elapsed, m.arrivals.Swap(0), m.refused.Swap(0), m.maxSum.Swap(0), &sums)
	m.last.Store(&r)
	if m.onWindow != nil {
		m.onWindow(r)
	}
	return r, true
}

// peek is the open window so far, before the first has closed.
func (m *Meter) peek(now time.Time) Report {
	elapsed := time.Duration(now.UnixNano() - m.start.Load())
	var sums [MaxSources]int64
	for i := range m.sources {
		sums[i] = m.sums[i].Load()
	}
	return m.report(elapsed, m.arrivals.Load(), m.refused.Load(), m.maxSum.Load(), &sums)
}

func (m *Meter) report(elapsed time.Duration, arrivals, refused, maxSum int64, sums *[MaxSources]int64) Report {
	r := Report{Window: elapsed, Arrivals: arrivals, Refused: refused}
	if elapsed > 0 {
		r.QPS = float64(arrivals) / elapsed.Seconds()
		r.EPS = float64(refused) / elapsed.Seconds()
	}
	if arrivals == 0 {
		var u [MaxSources]float64
		top, at := m.utilizations(&u)
		r.Utilization, r.Stage = top, m.sources[at].Name
		return r
	}
	at := 0
	for i := range m.sources {
		if sums[i] > sums[at] {
			at = i
		}
	}
	r.Utilization = float64(maxSum) / scale / float64(arrivals)
	r.Stage = m.sources[at].Name
	return r
}
