package xdsstream

import "github.com/legation-io/legation/internal/state/resource"

// PushTracer is told, for traces, of the responses a server sends and of
// their clients' answers (package tracing's Pushes is one). Its methods
// are called from the streams' goroutines, concurrently, on the push
// path: they must not block. A nil Config.PushTracer costs the push path
// one nil check per response and answer.
type PushTracer interface {
	// Sent: a stream sent a response at the view's revision rev.
	Sent(rev int64)
	// Answered: the client of node answered the response of type typ it
	// was sent as version (a SotW version_info or delta
	// system_version_info: the revision in decimal), with an ACK, or with
	// a NACK when nack. Called once per response answered.
	Answered(typ *resource.Type, version, node string, nack bool)
}

// traceSent tells the PushTracer, if any, of a response sent.
func (s *Stream[T]) traceSent() {
	if tr := s.core.Config.PushTracer; tr != nil {
		tr.Sent(s.Snap.Revision)
	}
}

// traceAnswer tells the PushTracer, if any, that the client answered the
// last response of type t recorded in rec.
func (s *Stream[T]) traceAnswer(t *resource.Type, rec *Record, nack bool) {
	if tr := s.core.Config.PushTracer; tr != nil && rec.answered != rec.Nonce {
		rec.answered = rec.Nonce
		tr.Answered(t, rec.Version, s.Node.GetId(), nack)
	}
}
