package cpu_test

import (
	"fmt"
	"log"
	"os"

	"github.com/floodgate-go/floodgate/shedder/cpu"
)

// A meter of the container's CPU against its cgroup quota. Here the root
// is a fixture of a cgroup v2 container limited to 2 CPUs; in a service,
// cpu.New() reads the real /proc and /sys/fs/cgroup.
func ExampleNew() {
	m, err := cpu.New(cpu.WithRoot(os.DirFS("testdata/v2")))
	if err != nil {
		log.Fatal(err)
	}
	// m.Utilization() returns the share of the quota used since the last call.
	fmt.Println(m.Limit(), "CPUs:", m.Source())
	// Output: 2 CPUs: cgroup v2 /sys/fs/cgroup/cpu.stat over /sys/fs/cgroup/cpu.max 2 CPUs
}
