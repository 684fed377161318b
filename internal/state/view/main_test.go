package view_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test of the package leaves a goroutine behind:
// every test stops its etcd, clients, watches and views.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
