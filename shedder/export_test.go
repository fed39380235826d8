package shedder

import "github.com/floodgate-go/floodgate"

// Test-only views of the shedders' state.

// Threshold returns the in-flight count at which priority p starts being
// shed, and the count below which shedding may stop. For critical (never
// shed) both are math.MaxInt64. PriorityUnspecified reports the default
// priority's thresholds.
func (s *Shedder) Threshold(p floodgate.Priority) (start, stop int64) {
	p = s.resolve(p)
	return s.gates[p].start.Load(), s.gates[p].stop.Load()
}

// Shedding reports whether priority p is currently in the shedding state.
func (s *Shedder) Shedding(p floodgate.Priority) bool {
	return s.gates[s.resolve(p)].shedding()
}

// InstanceID returns the name of this instance's entry in Redis.
func (f *Fleet) InstanceID() string { return f.instance }

// Threshold returns the fleet in-flight count from which non-critical
// requests are shed, capacity × (1 − reserve) rounded up, and the count
// below which shedding stops again (the hysteresis band below it).
func (f *Fleet) Threshold() (start, stop int64) { return f.gate.start.Load(), f.gate.stop.Load() }

// Shedding reports whether non-critical requests are currently shed.
func (f *Fleet) Shedding() bool { return f.gate.shedding() }

// LocalInFlight returns this instance's requests in flight of priority p
// (PriorityUnspecified: the total over all priorities).
func (f *Fleet) LocalInFlight(p floodgate.Priority) int64 {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return f.localTotal.Load()
	}
	return f.local[p].Load()
}

// OthersInFlight returns the other instances' requests in flight of
// priority p (PriorityUnspecified: the total) as of the last successful
// Sync, or 0 while the counts are stale.
func (f *Fleet) OthersInFlight(p floodgate.Priority) int64 {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return f.othersTotal.Load()
	}
	return f.others[p].Load()
}

// Stale reports whether the Fleet currently decides on local counts only.
func (f *Fleet) Stale() bool { return f.stale.Load() }
