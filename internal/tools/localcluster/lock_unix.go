//go:build unix

package localcluster

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile creates path and locks it (flock) for as long as the returned
// file stays open, or this process lives: the kernel releases the lock
// when the process dies, however it dies.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("localcluster: lock %s: %w", path, err)
	}
	return f, nil
}

// lockFree reports whether the lock file at path exists and no process
// holds it (this one included).
func lockFree(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	// Closing f releases the lock if it got it.
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
