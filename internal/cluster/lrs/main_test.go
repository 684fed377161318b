package lrs_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every Run
// returns, with its lease keep-alive; every gRPC server and client stops.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
