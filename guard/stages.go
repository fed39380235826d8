package guard

import (
	"fmt"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/cpu"
	"github.com/floodgate-go/floodgate/shedder/mem"
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
// a meter. So with the memory meter (package shedder/mem: the Go heap
// against GOMEMLIMIT, the cgroup's memory against its limit) and a
// memory_target: where no memory limit is known, a memory_target at New
// is an error naming why.
func (g *Guard) newShedder(file *policyfile.File) (*shedder.Shedder, error) {
	var opts []shedder.Option
	var adaptive *shedder.AdaptiveCapacity // the section's, if any
	if file.Shedder != nil {
		adaptive = file.Shedder.Adaptive
	}
	if m, err := cpu.New(); err == nil {
		opts = append(opts, shedder.WithCPU(m))
	} else if adaptive != nil && adaptive.CPUTarget > 0 {
		return nil, fmt.Errorf("guard: policy shedder.adaptive.cpu_target %v: the CPU cannot be read: %w", adaptive.CPUTarget, err)
	} else {
		g.c.logger.Debug("floodgate: no CPU meter for the shedder; a policy's shedder.adaptive.cpu_target will be refused", "err", err)
	}
	var memory interface{ Utilization() (float64, error) } // nil unless a memory limit is known
	if m, err := mem.New(); err == nil {
		memory = m
	} else if adaptive != nil && adaptive.MemoryTarget > 0 {
		return nil, fmt.Errorf("guard: policy shedder.adaptive.memory_target %v: %w", adaptive.MemoryTarget, err)
	} else {
		g.c.logger.Debug("floodgate: no memory meter for the shedder; a policy's shedder.adaptive.memory_target will be refused", "err", err)
	}
	if file.Shedder == nil {
		shed, err := shedder.New(defaultShedStart, append(opts, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{Min: defaultShedMin, Memory: memory}))...)
		if err != nil {
			return nil, fmt.Errorf("guard: shedder: %w", err)
		}
		return shed, nil
	}
	cfg := *file.Shedder
	switch {
	case memory != nil && adaptive != nil:
		a := *adaptive
		a.Memory = memory
		cfg.Adaptive = &a
	case memory != nil:
		// A fixed capacity: the meter is given at New, and the Shedder
		// keeps it through the Reconfigure to the fixed capacity below,
		// so that a reload adding a memory_target finds it.
		opts = append(opts, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{Memory: memory}))
	}
	// Built fixed and then given the section, a Shedder starts an
	// adaptive capacity where the section says.
	shed, err := shedder.New(cfg.Capacity, opts...)
	if err != nil {
		return nil, fmt.Errorf("guard: policy shedder: %w", err)
	}
	if err := shed.Reconfigure(cfg); err != nil {
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
