package relay_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: both
// legs of a relayed stream must end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
