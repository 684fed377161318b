package xdsstream

import (
	"context"

	"github.com/legation-io/legation/internal/state/view"
)

// A resource other than an SDS secret that carries an inline private key
// (view.Entry.InlineKey, found once per revision by the view) goes only
// to clients the Authorizer allows the scope's secrets: to any other
// client it does not exist, as a resource of a scope it cannot see does
// not. The decision is asked once per stream, on the first resource that
// needs it, and kept: what the Authorizer bases it on (the client's
// certificate, or its address in plaintext) does not change on a stream.

// keyDecision is a stream's decision on inline private keys.
type keyDecision uint8

const (
	keysUnasked keyDecision = iota
	keysAllowed
	keysWithheld
)

// KeysAllowed reports whether the client may be sent resources carrying
// an inline private key: whether the Authorizer allows it the secrets of
// the stream's group.
func (s *Stream[T]) KeysAllowed() bool {
	if s.keys == keysUnasked {
		s.keys = keysWithheld
		if KeysAllowed(s.Ctx, s.core.Config.Authorizer, s.Group) {
			s.keys = keysAllowed
		}
	}
	return s.keys == keysAllowed
}

// KeysAllowed reports whether the client of ctx, of group, may be sent
// resources carrying an inline private key under a: whether it may be
// sent the scope's secrets. A nil Authorizer allows everything.
func KeysAllowed(ctx context.Context, a Authorizer, group string) bool {
	return a == nil || a.Secrets(ctx, group) == nil
}

// Sendable returns e, or nil when it carries an inline private key the
// client may not be sent: then, to the client, it does not exist.
func (s *Stream[T]) Sendable(e *view.Entry) *view.Entry {
	if e == nil || !e.InlineKey || s.KeysAllowed() {
		return e
	}
	s.core.Metrics.KeysWithheld.WithLabelValues(e.Type.Name).Inc()
	return nil
}

// SendableEntries returns es, entries of the stream's snapshot, without
// the entries Sendable withholds, filtering es in place (the caller's
// fresh slice).
func (s *Stream[T]) SendableEntries(es []*view.Entry) []*view.Entry {
	if s.Snap.InlineKeys == 0 || s.keys == keysAllowed || !anyKey(es) {
		return es // the common case: no key stored, or the client may have them
	}
	return WithoutKeys(es, s.KeysAllowed(), s.core.Metrics)
}

// WithoutKeys returns es, or, unless allowed, es without the entries
// carrying an inline private key, filtered in place and counted in m.
func WithoutKeys(es []*view.Entry, allowed bool, m *Metrics) []*view.Entry {
	if allowed || !anyKey(es) {
		return es
	}
	out := es[:0]
	for _, e := range es {
		if e.InlineKey {
			m.KeysWithheld.WithLabelValues(e.Type.Name).Inc()
			continue
		}
		out = append(out, e)
	}
	clear(es[len(out):]) // the tail no longer holds entries
	return out
}

func anyKey(es []*view.Entry) bool {
	for _, e := range es {
		if e.InlineKey {
			return true
		}
	}
	return false
}

// KeysWithheld reports whether the stream withholds resources carrying
// an inline private key: a response shared by the streams of a group
// (named by group and version, not by content) must then be told apart
// from the one sent to streams that are sent them.
func (s *Stream[T]) KeysWithheld() bool { return s.keys == keysWithheld }
