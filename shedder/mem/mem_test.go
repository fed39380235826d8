package mem_test

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/floodgate-go/floodgate/shedder/mem"
)

const mib = 1 << 20

// goFigures returns a reader of the Go runtime's figures: GOMEMLIMIT,
// live heap, total, heap free, objects, released and unused.
func goFigures(v ...uint64) func() ([]uint64, bool) {
	return func() ([]uint64, bool) { return v, true }
}

// noGoLimit is a runtime without GOMEMLIMIT.
var noGoLimit = goFigures(math.MaxInt64, 10*mib, 20*mib, 0, 10*mib, 0, 0)

func TestCgroupFixtures(t *testing.T) {
	for _, tc := range []struct {
		dir, source string
		share       float64
	}{
		{"v2", "cgroup v2 /sys/fs/cgroup/memory.current less inactive_file over /sys/fs/cgroup/memory.max 268435456 bytes", 0.5},
		{"v2-nested", "cgroup v2 /sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.current less inactive_file over /sys/fs/cgroup/kubepods.slice/pod1/memory.max 134217728 bytes", 0.75},
		{"v1", "cgroup v1 /sys/fs/cgroup/memory/svc/a/memory.usage_in_bytes less total_inactive_file over /sys/fs/cgroup/memory/svc/memory.limit_in_bytes 536870912 bytes", 0.5},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			m, err := mem.NewFrom(os.DirFS("testdata/"+tc.dir), noGoLimit)
			if err != nil {
				t.Fatal(err)
			}
			if m.Source() != tc.source {
				t.Errorf("Source() = %q, want %q", m.Source(), tc.source)
			}
			u, err := m.Utilization()
			if err != nil || u != tc.share {
				t.Errorf("Utilization() = %v, %v; want %v", u, err, tc.share)
			}
		})
	}
}

func TestNoLimit(t *testing.T) {
	for _, tc := range []struct{ dir, want string }{
		{"v2-unlimited", "mem: no memory limit is known: GOMEMLIMIT is not set, and cgroup v2 sets no memory limit (/sys/fs/cgroup/app/memory.max and its parents)"},
		{"v1-unlimited", "mem: no memory limit is known: GOMEMLIMIT is not set, and cgroup v1 sets no memory limit (/sys/fs/cgroup/memory/memory.limit_in_bytes and its parents)"},
		{"no-cgroup", `mem: no memory limit is known: GOMEMLIMIT is not set, and no cgroup2 mount in /proc/self/mountinfo holds the process's cgroup "/"`},
		{"missing", "mem: no memory limit is known: GOMEMLIMIT is not set, and there is no /proc/self/cgroup"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			_, err := mem.NewFrom(os.DirFS("testdata/"+tc.dir), noGoLimit)
			if err == nil || err.Error() != tc.want {
				t.Errorf("NewFrom: %v\nwant %s", err, tc.want)
			}
		})
	}
}

// A cgroup file that does not parse is an error naming it, even where
// GOMEMLIMIT alone would do.
func TestBadFiles(t *testing.T) {
	withGo := goFigures(64*mib, 0, 0, 0, 0, 0, 0)
	_, err := mem.NewFrom(os.DirFS("testdata/bad-memmax"), withGo)
	if want := `mem: /sys/fs/cgroup/memory.max: "256M" is neither "max" nor a positive count of bytes`; err == nil || err.Error() != want {
		t.Errorf("bad-memmax: %v, want %s", err, want)
	}
	fsys := v2FS("1000\n", "anon 5\n")
	_, err = mem.NewFrom(fsys, withGo)
	if want := "mem: /sys/fs/cgroup/memory.stat has no inactive_file line"; err == nil || err.Error() != want {
		t.Errorf("no inactive_file: %v, want %s", err, want)
	}
	fsys = v2FS("1000\n", "inactive_file 0\n")
	m, err := mem.NewFrom(fsys, withGo)
	if err != nil {
		t.Fatal(err)
	}
	fsys["sys/fs/cgroup/memory.current"].Data = []byte("lots\n")
	if _, err := m.Utilization(); err == nil || err.Error() != `mem: /sys/fs/cgroup/memory.current: "lots" is not a count of bytes` {
		t.Errorf("Utilization with a bad memory.current: %v", err)
	}
}

func v2FS(current, stat string) fstest.MapFS {
	return fstest.MapFS{
		"proc/self/cgroup":             {Data: []byte("0::/\n")},
		"proc/self/mountinfo":          {Data: []byte("30 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")},
		"sys/fs/cgroup/memory.max":     {Data: []byte("1000\n")},
		"sys/fs/cgroup/memory.current": {Data: []byte(current)},
		"sys/fs/cgroup/memory.stat":    {Data: []byte(stat)},
	}
}

// The Go share is the live heap plus what the runtime holds outside heap
// objects, over GOMEMLIMIT; with a cgroup limit too the larger share
// counts, read afresh at every call.
func TestGoAndCgroup(t *testing.T) {
	// live 32 MiB; outside heap objects: total 48 - free 4 - objects 36 -
	// released 2 - unused 2 = 4 MiB; 36 MiB over 64 MiB.
	figures := []uint64{64 * mib, 32 * mib, 48 * mib, 4 * mib, 36 * mib, 2 * mib, 2 * mib}
	read := func() ([]uint64, bool) { return figures, true }
	m, err := mem.NewFrom(os.DirFS("testdata/no-cgroup"), read)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Go live heap and runtime memory over GOMEMLIMIT 67108864 bytes"; m.Source() != want {
		t.Errorf("Source() = %q, want %q", m.Source(), want)
	}
	if u, err := m.Utilization(); err != nil || u != 0.5625 {
		t.Errorf("Utilization() = %v, %v; want 0.5625", u, err)
	}
	figures = []uint64{math.MaxInt64, 32 * mib, 48 * mib, 4 * mib, 36 * mib, 2 * mib, 2 * mib}
	if _, err := m.Utilization(); err == nil || err.Error() != "mem: GOMEMLIMIT was set at New and is no longer, and there is no cgroup memory limit" {
		t.Errorf("Utilization with GOMEMLIMIT removed: %v", err)
	}

	figures = []uint64{64 * mib, 32 * mib, 48 * mib, 4 * mib, 36 * mib, 2 * mib, 2 * mib}
	fsys := v2FS("900\n", "inactive_file 100\n") // 800 of 1000
	m, err = mem.NewFrom(fsys, read)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Source(), "; cgroup v2 ") {
		t.Errorf("Source() = %q names not both", m.Source())
	}
	for _, step := range []struct {
		current string
		live    uint64
		want    float64
	}{
		{"900\n", 32 * mib, 0.8},    // the cgroup's 0.8 over Go's 0.5625
		{"600\n", 32 * mib, 0.5625}, // Go's over the cgroup's 0.5
		{"600\n", 56 * mib, 0.9375}, // 60 MiB of 64
		{"50\n", 0, 0.0625},         // inactive page cache above usage counts as 0
	} {
		fsys["sys/fs/cgroup/memory.current"].Data = []byte(step.current)
		figures[1] = step.live
		if u, err := m.Utilization(); err != nil || u != step.want {
			t.Errorf("current %q, live %d: Utilization() = %v, %v; want %v", strings.TrimSpace(step.current), step.live, u, err, step.want)
		}
	}
}

// On this host, with a GOMEMLIMIT set, 64 MiB kept live shows in the
// share after a collection.
func TestHost(t *testing.T) {
	old := debug.SetMemoryLimit(1 << 30)
	defer debug.SetMemoryLimit(old)
	m, err := mem.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(m.Source())
	before, err := m.Utilization()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64*mib)
	for i := range buf {
		buf[i] = 1
	}
	runtime.GC()
	after, err := m.Utilization()
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(buf)
	if after < 1.0/16 || after > 1 || after <= before {
		t.Errorf("share %v before and %v after 64 MiB of a 1 GiB limit were made live", before, after)
	}
}
