package mem

import (
	"testing"
	"testing/fstest"
)

// The parsers of /proc/self/cgroup, /proc/self/mountinfo and the cgroup
// memory files never panic, whatever the files hold, and a Meter they
// accept reports a share that is not negative.
func FuzzDetect(f *testing.F) {
	f.Add("0::/\n", "30 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "1000\n", "900\n", "inactive_file 5\n")
	f.Add("4:memory:/d\n", "35 30 0:31 /d /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n", "4096\n", "9\n", "total_inactive_file 1\n")
	f.Add("x", "- - -", "", "", "")
	none := func() ([]uint64, bool) { return nil, false }
	f.Fuzz(func(t *testing.T, cgroup, mountinfo, limit, usage, stat string) {
		fsys := fstest.MapFS{
			"proc/self/cgroup":                           {Data: []byte(cgroup)},
			"proc/self/mountinfo":                        {Data: []byte(mountinfo)},
			"sys/fs/cgroup/memory.max":                   {Data: []byte(limit)},
			"sys/fs/cgroup/memory.current":               {Data: []byte(usage)},
			"sys/fs/cgroup/memory.stat":                  {Data: []byte(stat)},
			"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte(limit)},
			"sys/fs/cgroup/memory/memory.usage_in_bytes": {Data: []byte(usage)},
			"sys/fs/cgroup/memory/memory.stat":           {Data: []byte(stat)},
		}
		m, err := newMeter(fsys, none)
		if err != nil {
			return
		}
		if m.cg == nil || !(m.cg.limit > 0) {
			t.Fatalf("a Meter with no cgroup limit from a runtime without GOMEMLIMIT")
		}
		if u, err := m.Utilization(); err == nil && u < 0 {
			t.Fatalf("utilization %v", u)
		}
	})
}
