//go:build !e2e

package sotw_test

// TestNackLogsBounded's size in make test: 100 streams NACKing with
// messages of 1,000 KiB, under the harness's 1 MiB request bound.
// nack_size_full_test.go has the full size, for make e2e.
const (
	nackStreams = 100
	nackMsgSize = 1000 << 10
	// harnessMaxRecv is the test server's bound on a request.
	harnessMaxRecv = 1 << 20
)
