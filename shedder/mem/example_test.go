package mem_test

import (
	"fmt"
	"log"
	"runtime/debug"

	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/mem"
)

// A meter of the Go runtime's memory against GOMEMLIMIT (set here as a
// service would set the environment variable) and of the container's
// against its cgroup memory limit, where one is set; it prints what the
// host it runs on has, so it has no fixed output (the package's tests
// read fixture cgroups of v1 and v2 hosts). The adaptive shedder then
// counts a window at or above 80% of the limit as an overload.
func ExampleNew() {
	debug.SetMemoryLimit(512 << 20)
	m, err := mem.New()
	if err != nil {
		log.Fatal(err) // no GOMEMLIMIT and no cgroup memory limit
	}
	fmt.Println(m.Source()) // e.g. Go live heap and runtime memory over GOMEMLIMIT 536870912 bytes
	u, err := m.Utilization()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.0f%% of the limit\n", 100*u)

	shed, err := shedder.New(100, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{
		MemoryTarget: 0.8,
		Memory:       m,
	}))
	if err != nil {
		log.Fatal(err)
	}
	_ = shed // the first stage of the chain
}
