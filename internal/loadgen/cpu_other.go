//go:build !unix

package loadgen

import "time"

// processCPU is zero: there is no getrusage here.
func processCPU() time.Duration { return 0 }
