package sotw_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// stream's goroutines must end with the stream.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
