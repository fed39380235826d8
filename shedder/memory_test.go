package shedder_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// memoryScript is a fake memory meter: each reading is the next share of
// the script (an error where it is negative).
type memoryScript struct {
	shares []float64
	reads  int
}

func (m *memoryScript) Utilization() (float64, error) {
	u := m.shares[m.reads]
	m.reads++
	if u < 0 {
		return 0, errors.New("cgroup gone")
	}
	return u, nil
}

// The memory signal, exactly: a window whose memory share as it closes is
// at or above MemoryTarget is an overload, one below is not, however
// steady the latency. Each wave is 20 requests of 50ms in a 100ms window:
// 200 requests a second at a least latency of 50ms, a Little's law
// estimate of 10 in flight, so an overload takes the capacity to
// min(capacity x 0.9, 10 x 1.25).
func TestAdaptiveCapacityMemory(t *testing.T) {
	clk := clock.New(time.Time{})
	meter := &memoryScript{shares: []float64{0.79, 0.8, 0.5, 0.95, -1}}
	s, err := shedder.New(40, shedder.WithClock(clk), shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{
		Min: 1, Max: 100, MinSamples: 20, MemoryTarget: 0.8, Memory: meter,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Memory != -1 || st.CPU != -1 {
		t.Fatalf("before any window: Memory %v, CPU %v; want -1, -1", st.Memory, st.CPU)
	}
	w := waves{t: t, s: s, clk: clk, window: 100 * time.Millisecond}
	for i, want := range []struct {
		memory     float64
		overloaded bool
		estimate   float64
		capacity   int64
		err        bool
	}{
		{0.79, false, 40, 40, false},   // below the target: healthy
		{0.8, true, 12.5, 12, false},   // at it: min(40 x 0.9, 12.5)
		{0.5, false, 12.5, 12, false},  // below again: held (nothing shed)
		{0.95, true, 11.25, 11, false}, // min(12.5 x 0.9, 12.5)
		{-1, false, 11.25, 11, true},   // a failed reading: decided without memory
	} {
		w.wave(20, 50*time.Millisecond, floodgate.OutcomeSuccess)
		st := s.Stats()
		if st.Windows != int64(i+1) || st.Memory != want.memory || st.Overloaded != want.overloaded ||
			st.Estimate != want.estimate || st.Capacity != want.capacity || (st.MemoryErr != nil) != want.err ||
			st.Latency != 50*time.Millisecond || st.Throughput != 200 {
			t.Errorf("window %d: %+v\nwant Memory %v, Overloaded %v, Estimate %v, Capacity %d, an error %v, Latency 50ms, Throughput 200",
				i+1, st, want.memory, want.overloaded, want.estimate, want.capacity, want.err)
		}
	}
	if meter.reads != 5 {
		t.Errorf("%d memory readings for 5 windows", meter.reads)
	}

	// Without a MemoryTarget the meter is not read, and Stats says so.
	if err := s.Reconfigure(shedder.Config{Capacity: 40, Adaptive: &shedder.AdaptiveCapacity{Min: 1, Max: 100, MinSamples: 20}}); err != nil {
		t.Fatal(err)
	}
	w.wave(20, 50*time.Millisecond, floodgate.OutcomeSuccess)
	if st := s.Stats(); st.Memory != -1 || st.MemoryErr != nil || meter.reads != 5 {
		t.Errorf("without a target: Memory %v, MemoryErr %v, %d readings; want -1, nil, 5", st.Memory, st.MemoryErr, meter.reads)
	}
}

// A memory target needs a meter; the one given is kept by later Configs
// without one, even through a fixed capacity; a bad target is named.
func TestAdaptiveCapacityMemoryErrors(t *testing.T) {
	_, err := shedder.New(10, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{MemoryTarget: 0.8}))
	if want := "shedder: WithAdaptiveCapacity: AdaptiveCapacity.MemoryTarget 0.8 needs a memory meter (AdaptiveCapacity.Memory)"; err == nil || err.Error() != want {
		t.Errorf("New: %v\nwant %s", err, want)
	}
	_, err = shedder.New(10, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{MemoryTarget: 1.5, Memory: &memoryScript{}}))
	if want := "shedder: WithAdaptiveCapacity: memory_target: 1.5 is out of range [0, 1]"; err == nil || err.Error() != want {
		t.Errorf("New: %v\nwant %s", err, want)
	}
	s, err := shedder.New(10)
	if err != nil {
		t.Fatal(err)
	}
	target := shedder.Config{Capacity: 10, Adaptive: &shedder.AdaptiveCapacity{MemoryTarget: 0.8}}
	if err := s.Check(target); err == nil || !strings.Contains(err.Error(), "shedder: Config: adaptive.memory_target: 0.8 needs a memory meter, and the Shedder has none (give it in AdaptiveCapacity.Memory)") {
		t.Errorf("Check without a meter: %v", err)
	}
	s, err = shedder.New(10, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{Memory: &memoryScript{}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reconfigure(shedder.Config{Capacity: 10}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconfigure(target); err != nil {
		t.Errorf("a memory target after a fixed capacity, the meter given at New: %v", err)
	}
}
