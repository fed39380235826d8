package shedder_test

import (
	"fmt"
	"log"

	"github.com/floodgate-go/floodgate/shedder"
)

// A shedder whose capacity follows the service instead of a guess: it
// starts at its Min, doubles every 100ms window in which it shed while the
// service's latency held, and when the latency rises past Tolerance (1.5)
// times its least, falls to what Little's law says the service holds
// (highest throughput x least latency) times Headroom (1.25). The
// thresholds stay shares of it: test traffic is shed from 70%, reads from
// 80%, writes from 90%, critical never. Reconfigure changes the settings
// at run time, as a policy reload does.
func ExampleWithAdaptiveCapacity() {
	s, err := shedder.New(8, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{
		Min: 8,
		Max: 2000,
		// CPUTarget: 0.9, with shedder.WithCPU(meter) (package
		// shedder/cpu), also counts the service as overloaded when the
		// container uses 90% of its CPU quota; MemoryTarget: 0.8 with
		// Memory: a *mem.Meter (package shedder/mem), when it holds 80%
		// of GOMEMLIMIT or of its cgroup's memory limit.
	}))
	if err != nil {
		log.Fatal(err)
	}
	st := s.Stats()
	fmt.Println("adaptive:", st.Adaptive, "capacity:", st.Capacity)

	cfg := s.Config()
	cfg.Adaptive.Min = 32 // from a policy file's shedder: adaptive: section, say
	if err := s.Reconfigure(cfg); err != nil {
		log.Fatal(err)
	}
	fmt.Println("capacity after raising the floor:", s.Capacity())
	// Output:
	// adaptive: true capacity: 8
	// capacity after raising the floor: 32
}
