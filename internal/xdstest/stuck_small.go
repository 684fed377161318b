//go:build !e2e

package xdstest

// StuckScale is the stuck-client runs' scale for `go test` (make test):
// a tenth of issue 13's clients and a twentieth of its updates, so that each protocol's run
// stays within about 20 s on two shared cores under the race detector.
// stuck_full.go has the full size (-tags e2e).
var StuckScale = StuckSize{Normal: 99, Updates: 100}
