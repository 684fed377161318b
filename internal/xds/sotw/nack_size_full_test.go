//go:build e2e

package sotw_test

// TestNackLogsBounded at full size (make e2e): 1,000 streams
// NACKing with 4 MiB messages, the test server taking requests of up to
// 5 MiB.
const (
	nackStreams    = 1000
	nackMsgSize    = 4 << 20
	harnessMaxRecv = 5 << 20
)
