//go:build unix

package cpu

import (
	"fmt"
	"syscall"
	"time"
)

// processUsage returns the user and system CPU time of this process.
var processUsage = func() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("cpu: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
