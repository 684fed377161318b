package e2e

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has Linux kill cmd's process if the test process dies
// first (a test timeout's panic, a kill), so no replica outlives its test.
// Linux sends it when the thread that started the process exits; Go's
// threads outlive the test unless a goroutine locked to one exits, which
// the tests do not do.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
