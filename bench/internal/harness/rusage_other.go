//go:build !unix

package harness

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
