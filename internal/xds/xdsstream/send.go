package xdsstream

import (
	"time"

	"github.com/legation-io/legation/internal/xds/limits"
)

// Sender sends one stream's messages, each bounded by a timeout: gRPC's
// SendMsg blocks while the client's flow-control window is full, and
// only the stream's end unblocks it. So each send runs in a goroutine of
// its own; when it has not returned in time, Send reports it, the
// stream's handler returns an error (SendTimeoutError), gRPC resets the
// stream, and that ends the blocked SendMsg and its goroutine. Its
// channel and timer are made once and reused by every send: a push to
// many streams costs a goroutine per send, nothing more. A Sender is
// used by one goroutine, the stream's sender, and not after a timeout.
type Sender struct {
	timeout limits.Bound[time.Duration]
	done    chan error // the send's result; buffered, so a late one never blocks
	timer   *time.Timer
}

// NewSender returns a Sender bounding each send by timeout; with no
// bound it sends inline.
func NewSender(timeout limits.Bound[time.Duration]) *Sender {
	return &Sender{timeout: timeout}
}

// Send sends m with send (a stream's SendMsg). timedOut is true when it
// did not return within the timeout; the stream must then end.
func (s *Sender) Send(send func(any) error, m any) (timedOut bool, err error) {
	d, ok := s.timeout.Limit()
	if !ok {
		return false, send(m)
	}
	if s.done == nil {
		s.done = make(chan error, 1)
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	go func() { s.done <- send(m) }()
	select {
	case err := <-s.done:
		s.timer.Stop()
		return false, err
	case <-s.timer.C:
		return true, nil
	}
}
