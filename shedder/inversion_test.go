package shedder_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// TestNoInversionInBandDefaults: less important traffic is always shed
// first. With the default thresholds and capacity 2, all three thresholds
// round up to 2 and the band puts the write gate's stop below the test
// gate's start: a test request was admitted at an in-flight count where a
// write was shed.
func TestNoInversionInBandDefaults(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(2)
	if err != nil {
		t.Fatal(err)
	}
	l := &load{t: t, s: s}
	l.set(2)
	if _, ok := probe(t, s, floodgate.PriorityWrite); ok {
		t.Fatal("write admitted at in flight 2 of capacity 2")
	}
	l.set(1)
	_, writeOK := probe(t, s, floodgate.PriorityWrite)
	_, testOK := probe(t, s, floodgate.PriorityTest)
	if !writeOK && testOK {
		t.Fatalf("in flight 1, capacity 2: write shed while test admitted (priority inversion)")
	}
	l.set(0)
}

// TestNoInversionInBand: the same with a wide but valid band
// (WithHysteresis(0.2, 0)) at capacity 100: write's stop (70) lies below
// read's start (80).
func TestNoInversionInBand(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(100, shedder.WithHysteresis(0.2, 0))
	if err != nil {
		t.Fatal(err)
	}
	l := &load{t: t, s: s}
	l.set(90)
	if _, ok := probe(t, s, floodgate.PriorityWrite); ok {
		t.Fatal("write admitted at 90")
	}
	l.set(75)
	_, writeOK := probe(t, s, floodgate.PriorityWrite)
	_, readOK := probe(t, s, floodgate.PriorityRead)
	if !writeOK && readOK {
		t.Fatalf("in flight 75: write shed while read admitted (priority inversion)")
	}
	l.set(0)
}

// TestNoInversionInHold: with a hold, each gate's hold runs from the last
// time a request of that priority saw the threshold: a read's hold could
// expire while a write's had not, and reads were admitted while writes
// were shed (default thresholds, capacity 100).
func TestNoInversionInHold(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s, err := shedder.New(100, shedder.WithClock(clk), shedder.WithHysteresis(0.05, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l := &load{t: t, s: s}
	l.set(95)
	if _, ok := probe(t, s, floodgate.PriorityRead); ok {
		t.Fatal("read admitted at 95")
	}
	clk.Advance(500 * time.Millisecond)
	if _, ok := probe(t, s, floodgate.PriorityWrite); ok {
		t.Fatal("write admitted at 95")
	}
	l.set(10)
	clk.Advance(700 * time.Millisecond)
	_, readOK := probe(t, s, floodgate.PriorityRead)
	_, writeOK := probe(t, s, floodgate.PriorityWrite)
	if readOK && !writeOK {
		t.Fatalf("in flight 10 of 100: read admitted while write shed (priority inversion)")
	}
	l.set(0)
}

// TestReconfigureFixedStaysFixed: Reconfigure to a fixed capacity leaves
// the old estimator reachable from the tickets of requests still in
// flight; when their Dones close a window it must not publish its learnt
// capacity over the fixed one (it did: 100 became 20).
func TestReconfigureFixedStaysFixed(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s, err := shedder.New(10, shedder.WithClock(clk),
		shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{Min: 1, Max: 1000, Window: time.Millisecond, MinSamples: 1}))
	if err != nil {
		t.Fatal(err)
	}
	var held []floodgate.Done
	for range 20 {
		d, done, _ := s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityWrite})
		if done != nil {
			held = append(held, done)
		}
		if !d.Allowed {
			break // a shed: the estimator counts it
		}
	}
	if err := s.Reconfigure(shedder.Config{Capacity: 100}); err != nil {
		t.Fatal(err)
	}
	if c := s.Capacity(); c != 100 {
		t.Fatalf("capacity right after Reconfigure = %d, want 100", c)
	}
	clk.Advance(10 * time.Millisecond)
	for _, d := range held {
		d(floodgate.Result{Outcome: floodgate.OutcomeSuccess})
	}
	if c, st := s.Capacity(), s.Stats(); c != 100 {
		t.Fatalf("fixed capacity 100 became %d after in-flight requests of the adaptive era finished (stats %+v)", c, st)
	}
}

// TestCapacityBeyondMaxRefused: a capacity or adaptive bound beyond
// MaxCapacity (2^53) is refused with an error naming it; MaxInt64 was
// accepted, and its float64 estimate converted back to int64 became
// negative, shedding everything non-critical.
func TestCapacityBeyondMaxRefused(t *testing.T) {
	t.Parallel()
	a := shedder.AdaptiveCapacity{Min: 1, Max: math.MaxInt64}
	if _, err := shedder.New(10, shedder.WithAdaptiveCapacity(a)); err == nil || !strings.Contains(err.Error(), "WithAdaptiveCapacity: max: ") {
		t.Errorf("adaptive Max MaxInt64: %v, want an error naming max", err)
	}
	s, err := shedder.New(10)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reconfigure(shedder.Config{Capacity: math.MaxInt64}); err == nil || !strings.Contains(err.Error(), "Config: capacity: ") {
		t.Errorf("Reconfigure to capacity MaxInt64: %v, want an error naming capacity", err)
	}
	if _, err := shedder.New(math.MaxInt64, shedder.WithThresholds(1, 1, 1)); err == nil || !strings.Contains(err.Error(), "MaxCapacity") {
		t.Errorf("New(MaxInt64): %v, want an error naming MaxCapacity", err)
	}
	if _, err := shedder.New(shedder.MaxCapacity, shedder.WithThresholds(1, 1, 1)); err != nil {
		t.Errorf("New(MaxCapacity): %v", err)
	}
}
