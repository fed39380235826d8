// Package mem measures how much of the memory it may use a service
// holds: the memory signal of floodgate's adaptive load shedder (package
// shedder, AdaptiveCapacity.MemoryTarget), beside the CPU one (package
// shedder/cpu).
//
// What it decides: which memory, against which limit. Two limits can end
// a Go service that runs out of memory before CPU, and the Meter reads
// each one that is set, reporting the larger share:
//
//   - The Go runtime's soft limit, GOMEMLIMIT (or debug.SetMemoryLimit),
//     read from runtime/metrics /gc/gomemlimit:bytes at every reading, so
//     a limit changed at run time is followed. The memory counted
//     against it is the heap the last collection found live
//     (/gc/heap/live:bytes) plus what the runtime holds outside heap
//     objects (goroutine stacks, runtime metadata, ...: the
//     /memory/classes/total:bytes less the heap's free, object, released
//     and unused classes). Not the total the runtime has mapped: with a
//     limit set the collector lets garbage fill the room up to the limit,
//     so the total sits near the limit whenever the live heap is above
//     half of it (GOGC=100), a service that is fine. The live heap is
//     what no collection gives back; as it nears the limit the collector
//     runs without pause and the process then outgrows the limit. It is
//     as old as the last collection, which, near the limit, is recent.
//   - The container's limit: cgroup v2 memory.max (the smallest of the
//     process's cgroup and its ancestors up to the cgroup2 mount; "max"
//     is none), against the working set of the process's cgroup,
//     memory.current less inactive_file of memory.stat (page cache the
//     kernel reclaims before it kills, as the kubelet counts it); cgroup
//     v1: memory.limit_in_bytes (a value of 2^62 or more is none) against
//     memory.usage_in_bytes less total_inactive_file. The kernel kills
//     the container at this limit.
//
// New fails when neither limit is set ("no memory limit is known"),
// naming why for each: there is no silent fallback to the host's memory.
// A cgroup file that exists but does not parse is an error naming the
// file. Source says what was detected, for logs.
//
// Unlike the CPU meter's, a reading is a level, not an average: the
// memory in use when Utilization is called; package shedder calls it
// once per window, when the window closes.
package mem
