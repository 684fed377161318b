package lrs

import "time"

// SetNow replaces s's clock; call it before s is used.
func (s *Server) SetNow(now func() time.Time) { s.now = now }

// Closed returns the windows closed by now, as Run would publish them.
func (s *Server) Closed(now time.Time) []Window { return s.closed(now) }
