package cpu

import (
	"testing"
	"testing/fstest"
	"time"

	"github.com/floodgate-go/floodgate/testing/clock"
)

// The parsers of /proc/self/cgroup, /proc/self/mountinfo and the cgroup
// files never panic, whatever the files hold, and a Meter they accept
// reports a positive limit.
func FuzzDetect(f *testing.F) {
	f.Add("0::/\n", "30 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "200000 100000\n", "usage_usec 5\n")
	f.Add("4:cpu,cpuacct:/d\n", "35 30 0:31 /d /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n", "max 100000\n", "9\n")
	f.Add("x", "- - -", "", "")
	f.Fuzz(func(t *testing.T, cgroup, mountinfo, quota, usage string) {
		fsys := fstest.MapFS{
			"proc/self/cgroup":                            {Data: []byte(cgroup)},
			"proc/self/mountinfo":                         {Data: []byte(mountinfo)},
			"sys/fs/cgroup/cpu.max":                       {Data: []byte(quota)},
			"sys/fs/cgroup/cpu.stat":                      {Data: []byte(usage)},
			"sys/fs/cgroup/cpu,cpuacct/cpuacct.usage":     {Data: []byte(usage)},
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":  {Data: []byte(quota)},
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": {Data: []byte("100000")},
		}
		clk := clock.New(time.Time{})
		m, err := New(WithRoot(fsys), WithClock(clk))
		if err != nil {
			return
		}
		if !(m.Limit() > 0) {
			t.Fatalf("limit %v from a Meter New accepted", m.Limit())
		}
		clk.Advance(time.Second)
		if u, err := m.Utilization(); err == nil && u < 0 {
			t.Fatalf("utilization %v", u)
		}
	})
}
