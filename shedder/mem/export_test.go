package mem

import "io/fs"

// NewFrom returns a Meter that reads proc/self/cgroup, proc/self/mountinfo
// and the cgroup files from root (paths relative to "/"), and the Go
// runtime's figures from read, which returns the goMetrics in their order
// (false: not supported).
func NewFrom(root fs.FS, read func() ([]uint64, bool)) (*Meter, error) {
	return newMeter(root, read)
}
