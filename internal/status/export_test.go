package status

// FullReads returns how often the writer's checks read the whole status
// directory.
func (w *Writer) FullReads() uint64 { return w.fullReads.Load() }
