package localcluster

import "syscall"

// sysProcAttr puts a child in a process group of its own, so that a
// terminal's Ctrl-C (SIGINT to the foreground group) reaches the owner
// only and the owner stops the children in order, and has Linux kill it
// if the thread that started it ends (see spawner): with the owner, even
// one killed by SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
