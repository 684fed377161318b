package tlsfiles_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: Run
// and the test servers must end with their tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
