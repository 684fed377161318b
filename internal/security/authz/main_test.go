package authz

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every Watcher's
// Run returns, and its watch with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
