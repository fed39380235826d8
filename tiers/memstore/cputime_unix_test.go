//go:build unix

package memstore_test

import "syscall"

// cpuTime is the CPU time (user + system) this process has used, in ns,
// or -1 if unknown. Benchmarks report it per op: on a shared machine wall
// time per op also counts the time other processes held the cores.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
