//go:build !unix

package harness

import "time"

// ProcessCPU reports false: the CPU time cannot be read here.
func ProcessCPU() (time.Duration, bool) { return 0, false }
