package xdsstream

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/status"
)

// authorize asks the Authorizer whether the client may claim node n of
// group, and keeps the channel that says when to ask again.
func (s *Stream[T]) authorize(n *corev3.Node, group string) error {
	a := s.core.Config.Authorizer
	if a == nil {
		return nil
	}
	recheck, err := a.Authorize(s.Ctx, n, group)
	if err != nil {
		s.core.Metrics.Denied.Inc()
		if ok, held := s.core.refusedLog.allow(time.Now()); ok {
			s.Log.Info("stream refused", "claimed_node", n.GetId(), "claimed_group", group, "err", status.Convert(err).Message(),
				"not_logged_since_last", held)
		}
		return err
	}
	s.recheck = recheck
	return nil
}

// secrets asks the Authorizer whether the client may be sent secrets.
func (s *Stream[T]) secrets() error {
	a := s.core.Config.Authorizer
	if a == nil {
		s.secretsOK = true
		return nil
	}
	if err := a.Secrets(s.Ctx, s.Group); err != nil {
		s.core.Metrics.Denied.Inc()
		return err
	}
	s.secretsOK = true
	return nil
}
