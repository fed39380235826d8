//go:build linux

package harness

import (
	"os/exec"
	"syscall"
)

// setProcAttr has the kernel SIGKILL redis-server if the bench dies without
// running its cleanup, so no server outlives the run.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
