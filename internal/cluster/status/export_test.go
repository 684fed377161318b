package status

import "time"

// FullReads returns how often the writer's checks read the whole status
// directory.
func (w *Writer) FullReads() uint64 { return w.fullReads.Load() }

// HistoryReads returns how often the writer read the history to trace
// rejections.
func (w *Writer) HistoryReads() uint64 { return w.rejected.reads.Load() }

// SetWatchTimingForTest shortens the CSDS cache's watch liveness checks:
// a progress request after quiet, a reload after stall. Call it before
// Run.
func (c *CSDS) SetWatchTimingForTest(quiet, stall, retry time.Duration) {
	c.cache.quiet, c.cache.stall, c.cache.retry = quiet, stall, retry
}
