package main

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/cpu"
)

// docs/overload.md's adaptive stages ("Overload control without a number
// to guess"), compiled and built by this package's tests (readme_test.go):
// the page holds the text between the markers verbatim.

// snippet-overload:start
// newAdaptiveChain puts a shedder whose capacity is learnt and an adaptive
// concurrency limit in front of the rate limits.
func newAdaptiveChain(limits floodgate.Admitter) (floodgate.Chain, error) {
	meter, err := cpu.New() // shedder/cpu: the container's CPU against its cgroup quota (v2 cpu.max, v1 cfs_quota)
	if err != nil {
		return nil, err
	}
	shed, err := shedder.New(8, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{
		Min:       8,    // the floor
		Max:       2000, // the ceiling
		CPUTarget: 0.9,  // optional: overloaded at 90% of the quota
		CPU:       meter,
	}))
	if err != nil {
		return nil, err
	}
	limit, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{
		Algorithm: concurrency.Gradient2, // or Vegas, AIMD
		Min:       8,
		Max:       500,
		Bypass:    floodgate.PriorityCritical, // it knows no priorities: never refuse these
	})
	if err != nil {
		return nil, err
	}
	return floodgate.Chain{shed, limit, limits}, nil
}

// snippet-overload:end
