//go:build !unix

package procstat

import "time"

// CPU is zero: there is no getrusage here.
func CPU() time.Duration { return 0 }
