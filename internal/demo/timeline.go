package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate"
)

// Sources is the order of the rate-limit decision sources in the report:
// decided with the store first, then locally on its behalf, then without
// it.
var Sources = []floodgate.Source{
	floodgate.SourceStore, floodgate.SourceCache, floodgate.SourceLease, floodgate.SourceAsync,
	floodgate.SourceLocalFallback, floodgate.SourceFailOpen, floodgate.SourceFailClosed,
}

// BreakerSpan is one stretch of time the Redis circuit breaker spent in
// one state, as offsets from the start of traffic.
type BreakerSpan struct {
	State    string // "closed", "half-open", "open"
	From, To time.Duration
}

// Event is something that happened in the run, shown as a marker: a
// scenario's traffic window or the Redis fault.
type Event struct {
	Name     string
	Kind     string // "surge", "scraper", "brute-force", "fault"
	From, To time.Duration
}

// timeline is the demo's own Observer: it counts every stage's decisions
// by outcome and source (for the notes), the rate-limit stage's decisions
// by source per time bucket, and denials by policy per time bucket; it
// also records the breaker's state changes.
type timeline struct {
	mu      sync.Mutex
	start   time.Time // zero until begin: decisions before it are not charted
	axis    Axis
	counts  map[string]int
	sources map[floodgate.Source][]int
	denials map[string][]int
	breaker []breakerChange
}

type breakerChange struct {
	at time.Time
	to gobreaker.State
}

func newTimeline(axis Axis) *timeline {
	return &timeline{axis: axis, counts: map[string]int{}, sources: map[floodgate.Source][]int{}, denials: map[string][]int{}}
}

// begin sets the start of traffic: bucket 0 starts there.
func (tl *timeline) begin(start time.Time) {
	tl.mu.Lock()
	tl.start = start
	tl.mu.Unlock()
}

// Observe implements floodgate.Observer.
func (tl *timeline) Observe(_ context.Context, _ *floodgate.Request, d floodgate.Decision, err error) {
	now := time.Now()
	k := string(d.Stage) + " " + map[bool]string{true: "allowed", false: "denied"}[d.Allowed]
	if d.Source != "" {
		k += " by " + string(d.Source)
	}
	if err != nil {
		k += " (with error)"
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.counts[k]++
	if tl.start.IsZero() {
		return
	}
	b := tl.axis.Index(now.Sub(tl.start))
	if d.Stage == floodgate.StageTiers && d.Source != "" {
		bucketsOf(tl.sources, d.Source, tl.axis.Buckets)[b]++
	}
	if !d.Allowed {
		p := d.Policy
		if p == "" {
			p = string(d.Stage)
		}
		bucketsOf(tl.denials, p, tl.axis.Buckets)[b]++
	}
}

// bucketsOf returns m[k], creating it with n zero buckets.
func bucketsOf[K comparable](m map[K][]int, k K, n int) []int {
	if m[k] == nil {
		m[k] = make([]int, n)
	}
	return m[k]
}

// breakerChanged is the fallback store's WithOnStateChange callback.
func (tl *timeline) breakerChanged(_ string, _, to gobreaker.State) {
	tl.mu.Lock()
	tl.breaker = append(tl.breaker, breakerChange{at: time.Now(), to: to})
	tl.mu.Unlock()
}

// breakerSpans turns the state changes into spans covering [0, end), the
// breaker being closed at the start.
func (tl *timeline) breakerSpans(end time.Duration) []BreakerSpan {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	spans := []BreakerSpan{{State: gobreaker.StateClosed.String(), From: 0}}
	for _, c := range tl.breaker {
		off := min(max(c.at.Sub(tl.start), 0), end)
		last := &spans[len(spans)-1]
		if off <= last.From {
			last.State = c.to.String() // a change at (or before) the start of the span replaces it
			continue
		}
		last.To = off
		spans = append(spans, BreakerSpan{State: c.to.String(), From: off})
	}
	spans[len(spans)-1].To = end
	// Merge neighbours left in the same state.
	out := spans[:1]
	for _, s := range spans[1:] {
		if s.State == out[len(out)-1].State {
			out[len(out)-1].To = s.To
			continue
		}
		out = append(out, s)
	}
	return out
}

// snapshot returns copies of the per-bucket series.
func (tl *timeline) snapshot() (sources map[floodgate.Source][]int, denials map[string][]int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	sources = map[floodgate.Source][]int{}
	for k, v := range tl.sources {
		sources[k] = slices.Clone(v)
	}
	denials = map[string][]int{}
	for k, v := range tl.denials {
		denials[k] = slices.Clone(v)
	}
	return sources, denials
}

// notes summarises every stage's decisions by outcome and source.
func (tl *timeline) notes() []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []string
	for _, stage := range []floodgate.Stage{floodgate.StageShedder, floodgate.StageConcurrency, floodgate.StageTiers} {
		var parts []string
		for k, v := range tl.counts {
			if strings.HasPrefix(k, string(stage)+" ") {
				parts = append(parts, fmt.Sprintf("%s: %d", strings.TrimPrefix(k, string(stage)+" "), v))
			}
		}
		if len(parts) > 0 {
			slices.Sort(parts)
			out = append(out, fmt.Sprintf("%s decisions — %s", stage, strings.Join(parts, ", ")))
		}
	}
	return out
}
