package e2e

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the bridge when the test binary
// dies, so a test killed by its timeout leaves no bridge behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
