package cpu_test

import (
	"fmt"
	"log"

	"github.com/floodgate-go/floodgate/shedder/cpu"
)

// A meter of the container's CPU against its cgroup quota, read from the
// real /proc and /sys/fs/cgroup (so the example prints what the host it
// runs on has, and has no fixed output; the package's tests read fixture
// cgroups of v1, v2 and hybrid hosts). Package shedder reads Utilization
// once per window (AdaptiveCapacity.CPU).
func ExampleNew() {
	m, err := cpu.New()
	if err != nil {
		log.Fatal(err) // outside Linux, or with /sys/fs/cgroup not mounted
	}
	fmt.Println(m.Limit(), "CPUs:", m.Source()) // e.g. 2 CPUs: cgroup v2 /sys/fs/cgroup/cpu.stat over /sys/fs/cgroup/cpu.max 2 CPUs
	u, err := m.Utilization()                   // the share of the quota used since New
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.0f%% of the quota\n", 100*u)
}
