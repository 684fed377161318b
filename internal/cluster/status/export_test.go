package status

import "time"

// FullReads returns how often the writer's checks read the whole status
// directory.
func (w *Writer) FullReads() uint64 { return w.fullReads.Load() }

// SetWatchTimingForTest shortens the CSDS cache's watch liveness checks:
// a progress request after quiet, a reload after stall. Call it before
// Run.
func (c *CSDS) SetWatchTimingForTest(quiet, stall, retry time.Duration) {
	c.cache.quiet, c.cache.stall, c.cache.retry = quiet, stall, retry
}
