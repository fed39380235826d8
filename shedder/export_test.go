package shedder

import "github.com/floodgate-go/floodgate"

// Test-only views of the shedders' state.

// Threshold returns the in-flight count at which priority p starts being
// shed, and the count below which shedding may stop. For critical (never
// shed) both are math.MaxInt64. PriorityUnspecified reports the default
// priority's thresholds.
func (s *Shedder) Threshold(p floodgate.Priority) (start, stop int64) {
	return s.gates[s.v.Resolve(p)].Bounds()
}

// Shedding reports whether priority p is currently in the shedding state.
func (s *Shedder) Shedding(p floodgate.Priority) bool {
	return s.gates[s.v.Resolve(p)].Shedding()
}
