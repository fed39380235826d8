// Package cpu measures how much of the CPU it may use a service used: the
// CPU signal of floodgate's adaptive load shedder (package shedder,
// AdaptiveCapacity.CPUTarget).
//
// What it decides: the denominator. A container limited to 2 CPUs on a
// 64-core host that uses 1.9 CPUs is at 95%, not 3%; so the limit is the
// container's CPU quota, read from its cgroup, and only without a quota
// the CPUs the process may run on (runtime.NumCPU, which honours CPU
// affinity and cpusets):
//
//   - cgroup v2: cpu.max ("$QUOTA $PERIOD", or "max $PERIOD" for none) of
//     the process's cgroup and of each ancestor up to the cgroup2 mount,
//     the smallest quota/period winning; usage from cpu.stat usage_usec;
//   - cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us (-1: none) of the
//     cpu hierarchy's cgroup and its ancestors; usage from cpuacct.usage
//     (nanoseconds) of the cpuacct hierarchy.
//
// The process's cgroup comes from /proc/self/cgroup and where each
// hierarchy is mounted from /proc/self/mountinfo, so a cgroup namespace
// (a container seeing its own cgroup as "/") and a host view (the full
// path under the mount's root) both resolve. A hybrid host (v1
// controllers and an empty cgroup2 mount) is read as v1: v2 is used only
// when the cgroup2 hierarchy holds the cpu controller's files.
//
// Two scopes (WithScope):
//
//   - Container (the default): the CPU time of the whole cgroup (every
//     process in the container) over the quota. It is what the kernel
//     throttles on, and what go-zero and Kratos shed on.
//   - Process: this process's CPU time (getrusage) over min(quota,
//     GOMAXPROCS): for a process sharing its container with others (a
//     benchmark's load generator, a sidecar in the same cgroup).
//
// Utilization returns the share used since the previous call (or since New
// for the first), so the caller decides the averaging window by how often
// it asks; package shedder asks once per window. New fails, naming the
// file, when the cgroup cannot be read in Container scope (outside Linux,
// or with /sys/fs/cgroup not mounted): there is no silent fallback to the
// host's cores. Source says what was detected, for logs.
package cpu
