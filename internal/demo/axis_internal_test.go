package demo

import (
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// TestAxisHasNoPartialBucket: the buckets cover a run exactly, whatever
// its length, and every offset in it lands in one.
func TestAxisHasNoPartialBucket(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 5 * time.Second, 7300 * time.Millisecond, 20 * time.Second, 61 * time.Second, 10 * time.Minute} {
		a := axisFor(d)
		if a.Buckets < 1 || a.Buckets > 120 {
			t.Errorf("%s: %d buckets", d, a.Buckets)
		}
		if covered := time.Duration(a.Buckets) * a.Width; covered > d || d-covered >= time.Duration(a.Buckets) {
			t.Errorf("%s: %d buckets of %s cover %s", d, a.Buckets, a.Width, covered)
		}
		if a.Index(0) != 0 || a.Index(d-1) != a.Buckets-1 || a.Index(d/2) != a.Buckets/2 && a.Buckets%2 == 0 {
			t.Errorf("%s: Index(0)=%d Index(d-1)=%d Index(d/2)=%d of %d", d, a.Index(0), a.Index(d-1), a.Index(d/2), a.Buckets)
		}
	}
	if a := axisFor(20 * time.Second); a.Buckets != 40 || a.Width != 500*time.Millisecond {
		t.Errorf("20s: %+v, want 40 buckets of 500ms", a)
	}
}

func TestBreakerSpans(t *testing.T) {
	tl := newTimeline(axisFor(10 * time.Second))
	start := time.Now()
	tl.begin(start)
	at := func(d time.Duration, s gobreaker.State) {
		tl.breaker = append(tl.breaker, breakerChange{at: start.Add(d), to: s})
	}
	at(2*time.Second, gobreaker.StateOpen)
	at(3*time.Second, gobreaker.StateHalfOpen)
	at(3*time.Second+time.Millisecond, gobreaker.StateOpen)
	at(4*time.Second, gobreaker.StateHalfOpen)
	at(4100*time.Millisecond, gobreaker.StateClosed)
	got := tl.breakerSpans(10 * time.Second)
	want := []BreakerSpan{
		{"closed", 0, 2 * time.Second},
		{"open", 2 * time.Second, 3 * time.Second},
		{"half-open", 3 * time.Second, 3*time.Second + time.Millisecond},
		{"open", 3*time.Second + time.Millisecond, 4 * time.Second},
		{"half-open", 4 * time.Second, 4100 * time.Millisecond},
		{"closed", 4100 * time.Millisecond, 10 * time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("spans %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
