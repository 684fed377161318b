package shard_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every Membership
// is left or closed, and with it memberlist, the lease keep-alive and the
// loops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
