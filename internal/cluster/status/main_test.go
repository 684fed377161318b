package status_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every Writer's
// Run returns, and with it the lease keep-alive; every gRPC server and
// client is stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
