//go:build unix && !linux

package localcluster

import "syscall"

// sysProcAttr puts a child in a process group of its own, so that a
// terminal's Ctrl-C (SIGINT to the foreground group) reaches the owner
// only and the owner stops the children in order. Only Linux can tie a
// child's life to its parent's: here children that outlive an owner that
// crashed are stopped by hand.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
