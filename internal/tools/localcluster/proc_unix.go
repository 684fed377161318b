//go:build unix

package localcluster

import (
	"os"
	"syscall"
)

// errUnsupported is nil where this package runs: Unix systems.
var errUnsupported error

// Signals sent to the processes.
var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)

// endedByTERM reports whether a process ended from SIGTERM: killed by it,
// or exiting with 128+15 as HAProxy does.
func endedByTERM(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return false
	}
	return ws.Signaled() && ws.Signal() == syscall.SIGTERM || ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGTERM)
}
