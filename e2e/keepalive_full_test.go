//go:build e2e

package e2e

import "time"

// The quiet of TestKeepaliveQuiet in make e2e: the three minutes,
// and the stricter policy that must end the stream.
const (
	keepaliveQuiet  = 3 * time.Minute
	keepaliveStrict = true
)
