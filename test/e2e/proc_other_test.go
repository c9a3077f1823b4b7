//go:build !linux

package e2e

import "os/exec"

// setDeathSignal does nothing outside Linux (no Pdeathsig there).
func setDeathSignal(*exec.Cmd) {}
