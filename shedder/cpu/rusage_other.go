//go:build !unix

package cpu

import (
	"errors"
	"time"
)

// processUsage is not available on this platform.
var processUsage = func() (time.Duration, error) {
	return 0, errors.New("cpu: process CPU time is not available on this platform")
}
