package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has Linux kill cmd's process if the test process dies
// first, so no cluster owner outlives its test.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
