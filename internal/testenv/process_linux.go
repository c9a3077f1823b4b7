package testenv

import (
	"os/exec"
	"syscall"
)

// setParentDeath makes the kernel kill the child when the test binary dies,
// so a crashed test leaves no server (or bridge) behind.
func setParentDeath(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
