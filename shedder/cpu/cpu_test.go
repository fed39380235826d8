package cpu

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/floodgate-go/floodgate/testing/clock"
)

// Each fixture directory under testdata is the root of a file system as
// one kind of host shows it: /proc/self/cgroup, /proc/self/mountinfo and
// the cgroup files.
func TestDetectFixtures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dir    string
		limit  float64
		source string
	}{
		{"v2", 2, "cgroup v2 /sys/fs/cgroup/cpu.stat over /sys/fs/cgroup/cpu.max 2 CPUs"},
		{"v2-nested", 1.5, "cgroup v2 /sys/fs/cgroup/kubepods.slice/pod1/ctr/cpu.stat over /sys/fs/cgroup/kubepods.slice/pod1/cpu.max 1.5 CPUs"},
		{"v2-unlimited", float64(runtime.NumCPU()), "cgroup v2 /sys/fs/cgroup/app/cpu.stat, no quota"},
		{"v1", 0.5, "cgroup v1 /sys/fs/cgroup/cpu,cpuacct/cpuacct.usage over /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us 0.5 CPUs"},
		{"hybrid", float64(runtime.NumCPU()), "cgroup v1 /sys/fs/cgroup/cpuacct/cpuacct.usage, no quota"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			m, err := New(WithRoot(os.DirFS("testdata/" + tc.dir)))
			if err != nil {
				t.Fatal(err)
			}
			if m.Limit() != tc.limit || !strings.HasPrefix(m.Source(), tc.source) {
				t.Errorf("limit %v, source %q; want %v and %q", m.Limit(), m.Source(), tc.limit, tc.source)
			}
		})
	}
}

func TestDetectErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dir  string
		want string
	}{
		{"bad-cpumax", `cpu: /sys/fs/cgroup/cpu.max: quota "lots" is neither "max" nor a positive count of microseconds`},
		{"bad-quota-v1", `cpu: /sys/fs/cgroup/cpu acct/cpu.cfs_quota_us: "0" is neither -1 nor a positive count of microseconds`},
		{"no-cgroup", `no cgroup2 mount in /proc/self/mountinfo holds the process's cgroup "/" (use WithScope(cpu.Process) outside a cgroup)`},
		{"missing", "open proc/self/cgroup: no such file or directory"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			m, err := New(WithRoot(os.DirFS("testdata/" + tc.dir)))
			if err == nil || m != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, %v; want an error containing %q", m, err, tc.want)
			}
		})
	}
}

// Utilization is the CPU time used since the previous call over the
// elapsed time times the quota, exactly, on fake time.
func TestUtilizationContainer(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"proc/self/cgroup":           {Data: []byte("0::/svc\n")},
		"proc/self/mountinfo":        {Data: []byte("30 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")},
		"sys/fs/cgroup/svc/cpu.max":  {Data: []byte("200000 100000\n")},
		"sys/fs/cgroup/svc/cpu.stat": {Data: []byte("usage_usec 1000000\n")},
	}
	clk := clock.New(time.Time{})
	m, err := New(WithRoot(fsys), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		usage   string
		elapsed time.Duration
		want    float64
	}{
		{"2500000", time.Second, 0.75}, // 1.5 CPU-seconds in 1s of a 2-CPU quota
		{"2500000", time.Second, 0},    // idle
		{"6500000", 2 * time.Second, 1},
		{"6600000", 0, 0}, // no time elapsed
	} {
		fsys["sys/fs/cgroup/svc/cpu.stat"] = &fstest.MapFile{Data: []byte("user_usec 1\nusage_usec " + step.usage + "\n")}
		clk.Advance(step.elapsed)
		got, err := m.Utilization()
		if err != nil || got != step.want {
			t.Fatalf("usage %s after %s: %v, %v; want %v", step.usage, step.elapsed, got, err, step.want)
		}
	}
	fsys["sys/fs/cgroup/svc/cpu.stat"] = &fstest.MapFile{Data: []byte("usage_usec -3\n")}
	if _, err := m.Utilization(); err == nil || !strings.Contains(err.Error(), `/sys/fs/cgroup/svc/cpu.stat: usage_usec "-3" is not a count of microseconds`) {
		t.Fatalf("bad cpu.stat: %v", err)
	}
}

// Process scope counts this process's CPU time over min(quota,
// GOMAXPROCS).
func TestUtilizationProcess(t *testing.T) {
	var used time.Duration
	defer func(f func() (time.Duration, error)) { processUsage = f }(processUsage)
	processUsage = func() (time.Duration, error) { return used, nil }
	clk := clock.New(time.Time{})
	// The v1 fixture's quota is 0.5 CPUs, below any GOMAXPROCS.
	m, err := New(WithScope(Process), WithRoot(os.DirFS("testdata/v1")), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if m.Limit() != 0.5 || !strings.HasPrefix(m.Source(), "process CPU time over the quota") {
		t.Fatalf("limit %v source %q; want the 0.5 CPU quota", m.Limit(), m.Source())
	}
	used = 250 * time.Millisecond
	clk.Advance(time.Second)
	if u, err := m.Utilization(); err != nil || u != 0.5 {
		t.Fatalf("Utilization = %v, %v; want 0.5", u, err)
	}
	// Without a cgroup, process scope uses GOMAXPROCS, and WithLimit
	// overrides.
	m, err = New(WithScope(Process), WithRoot(os.DirFS("testdata/no-cgroup")), WithLimit(4), WithClock(clk))
	if err != nil || m.Limit() != 4 {
		t.Fatalf("New = %v, %v; want limit 4", m, err)
	}
}

func TestOptionErrors(t *testing.T) {
	t.Parallel()
	_, err := New(WithScope(9), WithRoot(nil), WithClock(nil), WithLimit(0), nil)
	for _, want := range []string{"WithScope: unknown scope 9", "WithRoot: nil file system", "WithClock: nil clock", "WithLimit: 0 CPUs must be", "nil Option"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to mention %q", err, want)
		}
	}
}

// On a Linux host the real files are read (this machine's cgroup, whatever
// its version).
func TestHost(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("cgroups are Linux only")
	}
	m, err := New()
	if err != nil {
		t.Skipf("no readable cgroup here: %v", err)
	}
	if m.Limit() <= 0 {
		t.Fatalf("limit %v", m.Limit())
	}
	if _, err := m.Utilization(); err != nil {
		t.Fatal(err)
	}
	t.Log(m.Source())
}
