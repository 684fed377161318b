package view

// Checks returns how often the view's watch loop has woken on its timer.
func (v *View) Checks() uint64 { return v.checks.Load() }
