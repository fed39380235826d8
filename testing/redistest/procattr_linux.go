//go:build linux

package redistest

import (
	"os/exec"
	"syscall"
)

// setProcAttr asks the kernel to SIGKILL redis-server if the test binary
// dies without running its cleanups (a panic in another goroutine, a
// timeout), so no server outlives its test process.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
