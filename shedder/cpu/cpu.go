package cpu

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder/internal/cgroupfs"
)

// Scope is whose CPU time a Meter counts.
type Scope uint8

// Scopes.
const (
	// Container counts the CPU time of the process's cgroup (every
	// process in the container) against the cgroup's quota.
	Container Scope = iota
	// Process counts this process's CPU time against min(quota,
	// GOMAXPROCS).
	Process
)

// String returns "container" or "process".
func (s Scope) String() string {
	switch s {
	case Container:
		return "container"
	case Process:
		return "process"
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// Option configures New.
type Option func(*config)

type config struct {
	scope Scope
	root  fs.FS           // where proc/ and the cgroup files are read; tests set it (export_test.go)
	clock floodgate.Clock // elapsed time; tests set it (export_test.go)
	limit float64
	errs  []error
}

// WithScope sets whose CPU time is counted (default Container).
func WithScope(s Scope) Option {
	return func(c *config) {
		if s != Container && s != Process {
			c.errs = append(c.errs, fmt.Errorf("cpu: WithScope: unknown scope %d", uint8(s)))
		}
		c.scope = s
	}
}

// WithLimit sets the CPUs the service may use instead of detecting them
// (cores > 0, finite): for a platform that limits CPU by other means than a
// cgroup quota.
func WithLimit(cores float64) Option {
	return func(c *config) {
		if !(cores > 0) || math.IsInf(cores, 0) {
			c.errs = append(c.errs, fmt.Errorf("cpu: WithLimit: %v CPUs must be a finite number > 0", cores))
		}
		c.limit = cores
	}
}

// Meter measures CPU use as a share of the CPU the service may use. It is
// safe for concurrent use.
type Meter struct {
	usage  func() (time.Duration, error) // cumulative CPU time
	limit  float64                       // CPUs
	source string
	clock  floodgate.Clock

	mu        sync.Mutex
	lastUsage time.Duration
	lastTime  time.Time
}

// New returns a Meter, or an error naming what could not be read.
func New(opts ...Option) (*Meter, error) {
	c := config{clock: floodgate.SystemClock()}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("cpu: nil Option"))
			continue
		}
		o(&c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if c.root == nil {
		c.root = os.DirFS("/")
	}
	cg, cgErr := detect(c.root)
	m := &Meter{clock: c.clock}
	switch c.scope {
	case Container:
		if cgErr != nil {
			return nil, fmt.Errorf("cpu: container scope: %w (use WithScope(cpu.Process) outside a cgroup)", cgErr)
		}
		m.usage = cg.usage
		m.limit, m.source = cg.quota, cg.describe()
		if m.limit == 0 {
			m.limit = float64(runtime.NumCPU())
			m.source += fmt.Sprintf(", no quota: %d CPUs", runtime.NumCPU())
		}
	case Process:
		m.usage = processUsage
		procs := float64(runtime.GOMAXPROCS(0))
		m.limit, m.source = procs, fmt.Sprintf("process CPU time over GOMAXPROCS %d", runtime.GOMAXPROCS(0))
		if cgErr == nil && cg.quota > 0 && cg.quota < procs {
			m.limit = cg.quota
			m.source = fmt.Sprintf("process CPU time over the quota (%s)", cg.describe())
		}
	}
	if c.limit > 0 {
		m.limit = c.limit
		m.source += fmt.Sprintf(", limit set to %v CPUs", c.limit)
	}
	u, err := m.usage()
	if err != nil {
		return nil, err
	}
	m.lastUsage, m.lastTime = u, c.clock.Now()
	return m, nil
}

// Limit returns the CPUs the service may use: the quota, or what WithLimit
// set, or the CPUs the process may run on.
func (m *Meter) Limit() float64 { return m.limit }

// Source says what the Meter reads ("cgroup v2 /sys/fs/cgroup/cpu.stat
// over cpu.max 2 CPUs", ...), for logs.
func (m *Meter) Source() string { return m.source }

// Utilization returns the CPU time used since the previous call (or New)
// divided by the elapsed time times Limit: 0 when idle, 1 when the whole
// quota was used. It may exceed 1 a little (readings are not atomic, and a
// cgroup may burst). With no time elapsed it returns 0. On error the
// previous reading stays the baseline.
func (m *Meter) Utilization() (float64, error) {
	u, err := m.usage()
	if err != nil {
		return 0, err
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	elapsed := now.Sub(m.lastTime)
	used := u - m.lastUsage
	m.lastUsage, m.lastTime = u, now
	if elapsed <= 0 || used < 0 {
		return 0, nil
	}
	return used.Seconds() / (elapsed.Seconds() * m.limit), nil
}

// cgroup is what detect found.
type cgroup struct {
	version   int
	root      fs.FS
	usageFile string  // v2: cpu.stat; v1: cpuacct.usage
	quota     float64 // CPUs; 0: no quota
	quotaFile string  // the cpu.max or cpu.cfs_quota_us that set quota
}

func (cg *cgroup) describe() string {
	s := fmt.Sprintf("cgroup v%d /%s", cg.version, cg.usageFile)
	if cg.quota > 0 {
		s += fmt.Sprintf(" over /%s %v CPUs", cg.quotaFile, cg.quota)
	}
	return s
}

func (cg *cgroup) usage() (time.Duration, error) {
	data, err := fs.ReadFile(cg.root, cg.usageFile)
	if err != nil {
		return 0, fmt.Errorf("cpu: %w", err)
	}
	if cg.version == 2 {
		for line := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil || n < 0 {
					return 0, fmt.Errorf("cpu: /%s: usage_usec %q is not a count of microseconds", cg.usageFile, strings.TrimSpace(v))
				}
				return time.Duration(n) * time.Microsecond, nil
			}
		}
		return 0, fmt.Errorf("cpu: /%s has no usage_usec line", cg.usageFile)
	}
	s := strings.TrimSpace(string(data))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cpu: /%s: %q is not a count of nanoseconds", cg.usageFile, s)
	}
	return time.Duration(n), nil
}

// detect finds the process's cgroup CPU files under root.
func detect(root fs.FS) (*cgroup, error) {
	groups, err := cgroupfs.Groups(root)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	mounts, err := cgroupfs.Mounts(root)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	// v1 when a v1 hierarchy has the cpu controllers (a hybrid host's
	// cgroup2 mount then holds none), v2 otherwise.
	_, v1cpu := groups["cpu"]
	_, v1acct := groups["cpuacct"]
	if v1cpu || v1acct {
		return detectV1(root, groups, mounts)
	}
	p, ok := groups[""]
	if !ok {
		return nil, errors.New("cpu: /proc/self/cgroup names neither a cgroup v2 path nor v1 cpu controllers")
	}
	for _, m := range mounts {
		if m.FSType != "cgroup2" {
			continue
		}
		dir, ok := cgroupfs.Resolve(m, p)
		if !ok {
			continue
		}
		cg := &cgroup{version: 2, root: root, usageFile: path.Join(dir, "cpu.stat")}
		if _, err := fs.Stat(root, cg.usageFile); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
		if err := cg.v2Quota(dir, m.Point); err != nil {
			return nil, err
		}
		return cg, nil
	}
	return nil, fmt.Errorf("cpu: no cgroup2 mount in /proc/self/mountinfo holds the process's cgroup %q", p)
}

// detectV1 finds the cpu and cpuacct hierarchies of a v1 (or hybrid) host.
func detectV1(root fs.FS, groups map[string]string, mounts []cgroupfs.Mount) (*cgroup, error) {
	cg := &cgroup{version: 1, root: root}
	var cpuDir, acctDir, cpuPoint string
	for _, m := range mounts {
		if m.FSType != "cgroup" {
			continue
		}
		for _, o := range m.Opts {
			p, ok := groups[o]
			if !ok || (o != "cpu" && o != "cpuacct") {
				continue
			}
			dir, ok := cgroupfs.Resolve(m, p)
			if !ok {
				continue
			}
			if o == "cpu" && cpuDir == "" {
				cpuDir, cpuPoint = dir, m.Point
			}
			if o == "cpuacct" && acctDir == "" {
				acctDir = dir
			}
		}
	}
	if acctDir == "" {
		return nil, errors.New("cpu: no cgroup v2 cpu controller and no cgroup v1 cpuacct hierarchy in /proc/self/cgroup and /proc/self/mountinfo")
	}
	cg.usageFile = path.Join(acctDir, "cpuacct.usage")
	if _, err := fs.Stat(root, cg.usageFile); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	if cpuDir != "" {
		if err := cg.v1Quota(cpuDir, cpuPoint); err != nil {
			return nil, err
		}
	}
	return cg, nil
}

// v2Quota reads cpu.max from dir up to the mount point; the least
// quota/period wins.
func (cg *cgroup) v2Quota(dir, top string) error {
	for d := dir; ; d = path.Dir(d) {
		f := path.Join(d, "cpu.max")
		data, err := fs.ReadFile(cg.root, f)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("cpu: %w", err)
		default:
			fields := strings.Fields(string(data))
			if len(fields) != 2 {
				return fmt.Errorf("cpu: /%s: %q is not \"$QUOTA $PERIOD\"", f, strings.TrimSpace(string(data)))
			}
			period, perr := strconv.ParseInt(fields[1], 10, 64)
			if perr != nil || period <= 0 {
				return fmt.Errorf("cpu: /%s: period %q is not a positive count of microseconds", f, fields[1])
			}
			if fields[0] != "max" {
				q, qerr := strconv.ParseInt(fields[0], 10, 64)
				if qerr != nil || q <= 0 {
					return fmt.Errorf("cpu: /%s: quota %q is neither \"max\" nor a positive count of microseconds", f, fields[0])
				}
				cg.lower(float64(q)/float64(period), f)
			}
		}
		if d == top || d == "." || d == "/" {
			return nil
		}
	}
}

// v1Quota reads cpu.cfs_quota_us and cpu.cfs_period_us from dir up to
// the mount point; the least quota/period wins.
func (cg *cgroup) v1Quota(dir, top string) error {
	for d := dir; ; d = path.Dir(d) {
		qf, pf := path.Join(d, "cpu.cfs_quota_us"), path.Join(d, "cpu.cfs_period_us")
		qd, err := fs.ReadFile(cg.root, qf)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("cpu: %w", err)
		default:
			q, qerr := strconv.ParseInt(strings.TrimSpace(string(qd)), 10, 64)
			if qerr != nil || q == 0 || q < -1 {
				return fmt.Errorf("cpu: /%s: %q is neither -1 nor a positive count of microseconds", qf, strings.TrimSpace(string(qd)))
			}
			if q > 0 {
				pd, err := fs.ReadFile(cg.root, pf)
				if err != nil {
					return fmt.Errorf("cpu: %w", err)
				}
				period, perr := strconv.ParseInt(strings.TrimSpace(string(pd)), 10, 64)
				if perr != nil || period <= 0 {
					return fmt.Errorf("cpu: /%s: %q is not a positive count of microseconds", pf, strings.TrimSpace(string(pd)))
				}
				cg.lower(float64(q)/float64(period), qf)
			}
		}
		if d == top || d == "." || d == "/" {
			return nil
		}
	}
}

func (cg *cgroup) lower(cpus float64, file string) {
	if cg.quota == 0 || cpus < cg.quota {
		cg.quota, cg.quotaFile = cpus, file
	}
}
