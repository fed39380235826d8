package fleetshed

import "github.com/floodgate-go/floodgate"

// Test-only views of a Shedder's state.

// InstanceID returns the name of this instance's entries in Redis.
func (s *Shedder) InstanceID() string { return s.m.ID }

// CountsKey returns the Redis hash of the instances' in-flight counts.
func (s *Shedder) CountsKey() string { return s.keys[1] }

// Threshold returns the fleet in-flight count from which non-critical
// requests are shed, capacity × (1 − reserve) rounded up, and the count
// below which shedding stops again (the hysteresis band below it).
func (s *Shedder) Threshold() (start, stop int64) { return s.gate.Bounds() }

// Shedding reports whether non-critical requests are currently shed.
func (s *Shedder) Shedding() bool { return s.gate.Shedding() }

// LocalInFlight returns this instance's requests in flight of priority p
// (PriorityUnspecified: the total over all priorities).
func (s *Shedder) LocalInFlight(p floodgate.Priority) int64 {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return s.localTotal.Load()
	}
	return s.local[p].Load()
}

// OthersInFlight returns the other instances' requests in flight of
// priority p (PriorityUnspecified: the total) as of the last successful
// Sync, or 0 while the counts are stale.
func (s *Shedder) OthersInFlight(p floodgate.Priority) int64 {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return s.othersTotal.Load()
	}
	return s.others[p].Load()
}

// Stale reports whether the Shedder currently decides on local counts only.
func (s *Shedder) Stale() bool { return s.stale.Load() }
