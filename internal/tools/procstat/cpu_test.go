package procstat

import (
	"runtime"
	"testing"
	"time"
)

// TestCPU: spinning for a while shows as CPU time (on unix).
func TestCPU(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		return // no getrusage: CPU is zero by design
	}
	before := CPU()
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	if got := CPU() - before; got < 10*time.Millisecond {
		t.Fatalf("50ms of spinning counted %s of CPU", got)
	}
}
