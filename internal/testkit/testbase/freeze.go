package testbase

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Freeze stops the test's whole process for about d with SIGSTOP, as a
// CPU limit's throttling or a paused VM would: no goroutine runs, timers
// fall due unseen. A shell started first continues the process (SIGCONT)
// after d; Freeze returns once it has. Unix only.
func Freeze(t testing.TB, d time.Duration) {
	t.Helper()
	pid := os.Getpid()
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	cont := exec.Command("sh", "-c", "sleep "+secs+"; kill -CONT "+strconv.Itoa(pid))
	if err := cont.Start(); err != nil {
		t.Fatalf("testbase: Freeze: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("testbase: Freeze: %v", err)
	}
	if err := cont.Wait(); err != nil {
		t.Fatalf("testbase: Freeze: the shell that continues the process: %v", err)
	}
}
