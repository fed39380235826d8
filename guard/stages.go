package guard

import (
	"fmt"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/cpu"
)

// newShedder builds the priority shedder as the policy's shedder:
// section says, starting where it says (a fixed capacity, or an adaptive
// one from its capacity, default its min); without the section, an
// adaptive capacity from defaultShedStart, never below defaultShedMin.
// It holds the container's CPU meter (package shedder/cpu), read only
// while shedder.adaptive has a cpu_target, so that a cpu_target works
// from New on and when a reload adds one. Where the CPU cannot be read
// (no cgroup), a cpu_target at New is an error naming why, and a reload
// adding one is refused as policyfile refuses it for a Shedder without
// a meter.
func (g *Guard) newShedder(file *policyfile.File) (*shedder.Shedder, error) {
	var opts []shedder.Option
	if m, err := cpu.New(); err == nil {
		opts = append(opts, shedder.WithCPU(m))
	} else if s := file.Shedder; s != nil && s.Adaptive != nil && s.Adaptive.CPUTarget > 0 {
		return nil, fmt.Errorf("guard: policy shedder.adaptive.cpu_target %v: the CPU cannot be read: %w", s.Adaptive.CPUTarget, err)
	} else {
		g.c.logger.Debug("floodgate: no CPU meter for the shedder; a policy's shedder.adaptive.cpu_target will be refused", "err", err)
	}
	if file.Shedder == nil {
		shed, err := shedder.New(defaultShedStart, append(opts, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{Min: defaultShedMin}))...)
		if err != nil {
			return nil, fmt.Errorf("guard: shedder: %w", err)
		}
		return shed, nil
	}
	// Built fixed and then given the section, a Shedder starts an
	// adaptive capacity where the section says.
	shed, err := shedder.New(file.Shedder.Capacity, opts...)
	if err != nil {
		return nil, fmt.Errorf("guard: policy shedder: %w", err)
	}
	if err := shed.Reconfigure(*file.Shedder); err != nil {
		return nil, fmt.Errorf("guard: policy shedder: %w", err)
	}
	return shed, nil
}

// inFlightOptions are the in-flight limiter's caps: the global cap and
// the policy's per-key caps (concurrency: per_key:). A per-key cap is
// made here, at New: a reload changes it, and one the file adds later is
// refused (policyfile.Watch) until the service restarts.
func inFlightOptions(global int64, file *policyfile.File) []concurrency.Option {
	opts := []concurrency.Option{concurrency.WithGlobal(global)}
	for _, c := range file.PerKey {
		opts = append(opts, concurrency.WithPerKey(c))
	}
	return opts
}
