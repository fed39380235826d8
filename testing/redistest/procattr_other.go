//go:build !linux

package redistest

import "os/exec"

// setProcAttr does nothing outside Linux: cleanup relies on t.Cleanup.
func setProcAttr(cmd *exec.Cmd) {}
