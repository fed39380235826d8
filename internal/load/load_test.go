package load_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/load"
	"github.com/floodgate-go/floodgate/testing/clock"
)

type stage struct{ inflight, limit atomic.Int64 }

func (s *stage) source(name string) load.Source {
	return load.Source{Name: name, InFlight: s.inflight.Load, Limit: s.limit.Load}
}

func TestMeterWindows(t *testing.T) {
	clk := clock.New(time.Unix(1000, 0))
	var shed, conc stage
	shed.limit.Store(10)
	conc.limit.Store(100)
	var closed []load.Report
	m := load.New(clk, func(r load.Report) { closed = append(closed, r) },
		shed.source("shedder"), conc.source("concurrency"))

	// No arrival yet: the utilisation now, no rate.
	shed.inflight.Store(3)
	if got, want := m.Report(), (load.Report{Utilization: 0.3, Stage: "shedder"}); got != want {
		t.Fatalf("before any arrival: %+v, want %+v", got, want)
	}

	// 100 arrivals seeing 5/10 at the shedder and 20/100 at the limiter,
	// 100 seeing 7/10 and 90/100: the mean of the largest is
	// (0.5+0.9)/2 and the shedder binds: its mean is 0.6, the limiter's
	// 0.55.
	shed.inflight.Store(5)
	conc.inflight.Store(20)
	for range 100 {
		m.Arrive()
	}
	shed.inflight.Store(7)
	conc.inflight.Store(90)
	for range 100 {
		m.Arrive()
	}
	for range 20 {
		m.Refuse()
	}
	clk.Advance(50 * time.Millisecond)
	// Not due (under MinWindow): the window so far.
	if got := m.Report(); got.Arrivals != 200 || got.Window != 50*time.Millisecond || len(closed) != 0 {
		t.Fatalf("open window: %+v, %d closed", got, len(closed))
	}
	clk.Advance(150 * time.Millisecond)
	got := m.Report()
	want := load.Report{Utilization: 0.7, Stage: "shedder", QPS: 1000, EPS: 100,
		Window: 200 * time.Millisecond, Arrivals: 200, Refused: 20}
	if got != want {
		t.Fatalf("closed window: %+v, want %+v", got, want)
	}
	if len(closed) != 1 || closed[0] != want {
		t.Fatalf("onWindow got %+v, want one %+v", closed, want)
	}

	// A report before the next window is due repeats the last one.
	m.Arrive()
	clk.Advance(500 * time.Millisecond)
	if got := m.Report(); got != want {
		t.Fatalf("between windows: %+v, want %+v", got, want)
	}
	// MaxWindow closes it with one arrival.
	clk.Advance(500 * time.Millisecond)
	got = m.Report()
	want = load.Report{Utilization: 0.9, Stage: "concurrency", QPS: 1, Window: time.Second, Arrivals: 1}
	if got != want {
		t.Fatalf("quiet window: %+v, want %+v", got, want)
	}
	if len(closed) != 2 {
		t.Fatalf("%d windows closed, want 2", len(closed))
	}
}

func TestMeterNoLimit(t *testing.T) {
	clk := clock.New(time.Unix(1000, 0))
	var s stage
	s.inflight.Store(4) // a limit of 0 reads as no load
	m := load.New(clk, nil, s.source("adaptive"))
	m.Arrive()
	clk.Advance(time.Second)
	if got, want := m.Report(), (load.Report{Stage: "adaptive", QPS: 1, Window: time.Second, Arrivals: 1}); got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
}
