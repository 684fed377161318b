package xdsstream

import (
	"sync/atomic"
	"time"
)

// logEvery is how often at most a burstLog logs: what one client can do
// to many streams at once (open them with an identity that is refused,
// stop reading on all of them) is one line a second, not one per stream.
const logEvery = time.Second

// burstLog lets one log line of a kind through per logEvery, counting
// those it held back for the next line to report. Its methods may be
// called concurrently.
type burstLog struct {
	last       atomic.Int64 // unix nanoseconds of the last line let through
	suppressed atomic.Int64 // lines held back since
}

// allow reports whether a line may be logged now and, if so, how many
// were held back since the last one.
func (b *burstLog) allow(now time.Time) (ok bool, suppressed int64) {
	last := b.last.Load()
	if now.UnixNano()-last < int64(logEvery) || !b.last.CompareAndSwap(last, now.UnixNano()) {
		b.suppressed.Add(1)
		return false, 0
	}
	return true, b.suppressed.Swap(0)
}
