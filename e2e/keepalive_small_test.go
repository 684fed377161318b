//go:build !e2e

package e2e

import "time"

// The quiet of TestKeepaliveQuiet in make test: two of the client's
// pings. make e2e: keepalive_full_test.go.
const (
	keepaliveQuiet  = 25 * time.Second
	keepaliveStrict = false
)
