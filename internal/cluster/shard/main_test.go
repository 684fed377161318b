package shard_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakWait is how long TestMain waits for goroutines to end before it
// calls them leaked: memberlist's probe goroutines outlive its Shutdown
// until their timers fire (a probe interval and timeout, 1.5s).
const leakWait = 5 * time.Second

// TestMain checks that no test leaves a goroutine behind: every Membership
// is left or closed, and with it memberlist, the lease keep-alive and the
// loops.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		err := goleak.Find()
		for deadline := time.Now().Add(leakWait); err != nil && time.Now().Before(deadline); err = goleak.Find() {
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
