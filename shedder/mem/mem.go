package mem

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate/shedder/internal/cgroupfs"
)

// The runtime/metrics samples a Go reading takes, in this order.
var goMetrics = []string{
	"/gc/gomemlimit:bytes",
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/unused:bytes",
}

// noGoLimit is what /gc/gomemlimit:bytes holds when GOMEMLIMIT is not set.
const noGoLimit = math.MaxInt64

// noV1Limit is the least cgroup v1 memory.limit_in_bytes taken as no
// limit (the kernel reports "none" as 2^63 rounded down to a page).
const noV1Limit = 1 << 62

// Meter measures the memory a service holds as a share of the memory it
// may use. It is safe for concurrent use.
type Meter struct {
	read   func() ([]uint64, bool) // the goMetrics; readMetrics, or a test's
	goOn   bool                    // GOMEMLIMIT was set at New
	cg     *cgroup                 // nil: no cgroup limit
	source string
}

// New returns a Meter of the limits that are set, or an error naming
// why no limit is known or which file could not be read.
func New() (*Meter, error) {
	return newMeter(os.DirFS("/"), readMetrics)
}

// readMetrics reads the goMetrics from runtime/metrics; false when this
// runtime does not support one.
func readMetrics() ([]uint64, bool) {
	s := make([]metrics.Sample, len(goMetrics))
	for i, name := range goMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	v := make([]uint64, len(s))
	for i := range s {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return nil, false
		}
		v[i] = s[i].Value.Uint64()
	}
	return v, true
}

func newMeter(root fs.FS, read func() ([]uint64, bool)) (*Meter, error) {
	m := &Meter{read: read}
	var why []string
	if lim, _ := m.goReading(); lim > 0 {
		m.goOn = true
		m.source = fmt.Sprintf("Go live heap and runtime memory over GOMEMLIMIT %d bytes", lim)
	} else {
		why = append(why, "GOMEMLIMIT is not set")
	}
	cg, none, err := detect(root)
	if err != nil {
		return nil, err
	}
	if cg != nil {
		m.cg = cg
		if m.source != "" {
			m.source += "; "
		}
		m.source += cg.describe()
	} else {
		why = append(why, none)
	}
	if !m.goOn && m.cg == nil {
		return nil, fmt.Errorf("mem: no memory limit is known: %s", strings.Join(why, ", and "))
	}
	return m, nil
}

// Source says what the Meter reads ("Go live heap and runtime memory
// over GOMEMLIMIT 67108864 bytes; cgroup v2 /sys/fs/cgroup/memory.current
// over /sys/fs/cgroup/memory.max 268435456 bytes"), for logs.
func (m *Meter) Source() string { return m.source }

// Utilization returns the memory in use as a share of its limit, the
// larger of the Go runtime's (over GOMEMLIMIT) and the cgroup's (over its
// memory limit), each where New found the limit set: 0 when empty, 1 at
// the limit; it may exceed 1. A GOMEMLIMIT removed since New leaves the
// cgroup's share, or is an error when there is no cgroup limit.
func (m *Meter) Utilization() (float64, error) {
	share := 0.0
	known := false
	if m.goOn {
		if lim, used := m.goReading(); lim > 0 {
			share, known = float64(used)/float64(lim), true
		}
	}
	if m.cg != nil {
		used, err := m.cg.usage()
		if err != nil {
			return 0, err
		}
		share, known = max(share, float64(used)/float64(m.cg.limit)), true
	}
	if !known {
		return 0, errors.New("mem: GOMEMLIMIT was set at New and is no longer, and there is no cgroup memory limit")
	}
	return share, nil
}

// goReading returns GOMEMLIMIT (0 when not set) and the Go memory in use
// counted against it.
func (m *Meter) goReading() (limit, used int64) {
	u, ok := m.read()
	if !ok || len(u) != len(goMetrics) {
		return 0, 0 // not supported by this runtime: no Go limit
	}
	v := make([]int64, len(u))
	for i, x := range u {
		v[i] = int64(min(x, math.MaxInt64))
	}
	if v[0] <= 0 || v[0] == noGoLimit {
		return 0, 0
	}
	outside := v[2] - v[3] - v[4] - v[5] - v[6] // stacks, metadata, ...
	return v[0], v[1] + max(outside, 0)
}

// cgroup is the memory controller detect found.
type cgroup struct {
	version   int
	root      fs.FS
	usageFile string // v2: memory.current; v1: memory.usage_in_bytes
	statFile  string // memory.stat
	inactive  string // the memory.stat key of the reclaimable page cache
	limit     int64  // bytes
	limitFile string // the memory.max or memory.limit_in_bytes that set limit
}

func (cg *cgroup) describe() string {
	return fmt.Sprintf("cgroup v%d /%s less %s over /%s %d bytes", cg.version, cg.usageFile, cg.inactive, cg.limitFile, cg.limit)
}

// usage returns the working set: the usage less the inactive page cache.
func (cg *cgroup) usage() (int64, error) {
	data, err := fs.ReadFile(cg.root, cg.usageFile)
	if err != nil {
		return 0, fmt.Errorf("mem: %w", err)
	}
	s := strings.TrimSpace(string(data))
	used, err := strconv.ParseInt(s, 10, 64)
	if err != nil || used < 0 {
		return 0, fmt.Errorf("mem: /%s: %q is not a count of bytes", cg.usageFile, s)
	}
	stat, err := fs.ReadFile(cg.root, cg.statFile)
	if err != nil {
		return 0, fmt.Errorf("mem: %w", err)
	}
	for line := range strings.Lines(string(stat)) {
		if v, ok := strings.CutPrefix(line, cg.inactive+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("mem: /%s: %s %q is not a count of bytes", cg.statFile, cg.inactive, strings.TrimSpace(v))
			}
			return max(used-n, 0), nil
		}
	}
	return 0, fmt.Errorf("mem: /%s has no %s line", cg.statFile, cg.inactive)
}

// detect finds the process's cgroup memory files under root: the cgroup,
// or nil and why there is no limit, or an error naming a file that does
// not parse.
func detect(root fs.FS) (*cgroup, string, error) {
	groups, err := cgroupfs.Groups(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "there is no /proc/self/cgroup", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("mem: %w", err)
	}
	mounts, err := cgroupfs.Mounts(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "there is no /proc/self/mountinfo", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("mem: %w", err)
	}
	// v1 when a v1 hierarchy has the memory controller (a hybrid host's
	// cgroup2 mount then holds none), v2 otherwise.
	fstype, key := "cgroup2", ""
	cg := &cgroup{version: 2, root: root, inactive: "inactive_file"}
	if _, ok := groups["memory"]; ok {
		fstype, key = "cgroup", "memory"
		cg = &cgroup{version: 1, root: root, inactive: "total_inactive_file"}
	}
	p, ok := groups[key]
	if !ok {
		return nil, "/proc/self/cgroup names neither a cgroup v2 path nor a v1 memory controller", nil
	}
	for _, mt := range mounts {
		if mt.FSType != fstype || (key != "" && !slices.Contains(mt.Opts, key)) {
			continue
		}
		dir, ok := cgroupfs.Resolve(mt, p)
		if !ok {
			continue
		}
		usage, limit := "memory.current", "memory.max"
		if cg.version == 1 {
			usage, limit = "memory.usage_in_bytes", "memory.limit_in_bytes"
		}
		cg.usageFile, cg.statFile = path.Join(dir, usage), path.Join(dir, "memory.stat")
		if _, err := fs.Stat(root, cg.usageFile); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Sprintf("the cgroup has no /%s (no memory controller)", cg.usageFile), nil
		}
		err := cgroupfs.Up(dir, mt.Point, func(d string) error { return cg.lower(path.Join(d, limit)) })
		if err != nil {
			return nil, "", err
		}
		if cg.limit == 0 {
			return nil, fmt.Sprintf("cgroup v%d sets no memory limit (/%s and its parents)", cg.version, path.Join(dir, limit)), nil
		}
		if _, err := cg.usage(); err != nil {
			return nil, "", err
		}
		return cg, "", nil
	}
	return nil, fmt.Sprintf("no %s mount in /proc/self/mountinfo holds the process's cgroup %q", fstype, p), nil
}

// lower reads the limit file f, if there is one, and keeps its limit
// when it is the least so far.
func (cg *cgroup) lower(f string) error {
	data, err := fs.ReadFile(cg.root, f)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mem: %w", err)
	}
	s := strings.TrimSpace(string(data))
	if cg.version == 2 && s == "max" {
		return nil
	}
	n, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil || n <= 0 {
		if cg.version == 2 {
			return fmt.Errorf("mem: /%s: %q is neither \"max\" nor a positive count of bytes", f, s)
		}
		return fmt.Errorf("mem: /%s: %q is not a positive count of bytes", f, s)
	}
	if cg.version == 1 && n >= noV1Limit {
		return nil
	}
	if cg.limit == 0 || n < cg.limit {
		cg.limit, cg.limitFile = n, f
	}
	return nil
}
