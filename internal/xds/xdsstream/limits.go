package xdsstream

import (
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/xds/limits"
)

// The limit label values of Metrics.LimitHits.
const (
	LimitFirstRequest   = "first_request"
	LimitNames          = "names"
	LimitNameLength     = "name_length"
	LimitInitialVersion = "initial_resource_versions"
	LimitNackMessage    = "nack_message"
	LimitSendTimeout    = "send_timeout"
	LimitNodeIDLength   = "node_id_length"
	LimitNodeIDText     = "node_id_text"
	LimitSubscribed     = "subscribed_bytes"
	LimitSubscribedConn = "subscribed_bytes_conn"
)

// CheckNames returns INVALID_ARGUMENT, naming the bound and its flag, when
// a name in names (the request's field, for the message) is longer than
// MaxNameLength.
func (s *Stream[T]) CheckNames(t *resource.Type, field string, names []string) error {
	return s.core.CheckNames(t, field, names)
}

// CheckName is CheckNames of one name.
func (s *Stream[T]) CheckName(t *resource.Type, field, name string) error {
	return s.core.checkName(t, field, name)
}

// CheckCount returns RESOURCE_EXHAUSTED, naming the bound and its flag,
// when n names of type t (subscribed, or in field) are more than
// MaxNames. limit is the metric's label.
func (s *Stream[T]) CheckCount(t *resource.Type, limit, field string, n int) error {
	return s.core.CheckCount(t, limit, field, n)
}

// CheckList returns the error of CheckCount, counted under limit, or of
// CheckNames for names, a list of names of a request (field, for the
// message); nil when both pass.
func (s *Stream[T]) CheckList(t *resource.Type, limit, field string, names []string) error {
	return s.core.CheckList(t, limit, field, names)
}

// CheckList is Stream.CheckList for a poll.
func (c *Core[T]) CheckList(t *resource.Type, limit, field string, names []string) error {
	if err := c.CheckCount(t, limit, field, len(names)); err != nil {
		return err
	}
	return c.CheckNames(t, field, names)
}

// CheckNames is Stream.CheckNames for a poll (REST-JSON, unary Fetch).
func (c *Core[T]) CheckNames(t *resource.Type, field string, names []string) error {
	for _, n := range names {
		if err := c.checkName(t, field, n); err != nil {
			return err
		}
	}
	return nil
}

func (c *Core[T]) checkName(t *resource.Type, field, name string) error {
	b := c.Config.MaxNameLength
	if b.Allows(len(name)) {
		return nil
	}
	max, _ := b.Limit()
	c.Metrics.LimitHits.WithLabelValues(LimitNameLength).Inc()
	return status.Errorf(codes.InvalidArgument, "%s %s: a name of %d bytes is longer than the bound of %d (--max-name-length)", t.Name, field, len(name), max)
}

// CheckCount is Stream.CheckCount for a poll, whose names are bounded as
// a stream's are.
func (c *Core[T]) CheckCount(t *resource.Type, limit, field string, n int) error {
	b := c.Config.MaxNames
	if b.Allows(n) {
		return nil
	}
	max, _ := b.Limit()
	c.Metrics.LimitHits.WithLabelValues(limit).Inc()
	return status.Errorf(codes.ResourceExhausted, "%s %s: %d names are more than the bound of %d per type per stream or poll (--max-names)", t.Name, field, n, max)
}

// CheckNode returns INVALID_ARGUMENT, naming the bound and its flag, when
// the id of node n is longer than MaxNodeIDLength, or naming the rule
// when it is not printable text (limits.CheckNodeID): ids are kept per
// stream, logged, written to the status directory in etcd and shown to
// operators.
func (c *Core[T]) CheckNode(n *corev3.Node) error {
	if err := limits.CheckNodeID(n.GetId()); err != nil {
		c.Metrics.LimitHits.WithLabelValues(LimitNodeIDText).Inc()
		return status.Error(codes.InvalidArgument, err.Error())
	}
	b := c.Config.MaxNodeIDLength
	if b.Allows(len(n.GetId())) {
		return nil
	}
	max, _ := b.Limit()
	c.Metrics.LimitHits.WithLabelValues(LimitNodeIDLength).Inc()
	return status.Errorf(codes.InvalidArgument, "node.id: an id of %d bytes is longer than the bound of %d (--max-node-id-length)", len(n.GetId()), max)
}

// truncate cuts msg to b's max bytes at a rune boundary and marks the
// cut. It reports whether it cut.
func truncate(msg string, b limits.Bound[int]) (string, bool) {
	if b.Allows(len(msg)) {
		return msg, false
	}
	cut, _ := b.Limit()
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "... [" + strconv.Itoa(len(msg)-cut) + " more bytes cut by --max-nack-message]", true
}

// maxNackKeys bounds the NACKs a nackLog tracks in one window; further
// distinct ones are counted together.
const maxNackKeys = 1024

// nackLog logs a NACK once per (type, version, message) per window and
// per server, not once per stream: the first at Warn, the repeats summed
// up in one line when the window ends. It holds at most maxNackKeys
// entries, cleared every window. Its methods may be called concurrently.
type nackLog struct {
	window time.Duration
	log    *slog.Logger

	mu      sync.Mutex // guards the fields below
	repeats map[nackKey]int
	dropped int         // NACKs not logged: the map was full
	timer   *time.Timer // ends the window; nil when none is open
}

type nackKey struct{ typ, version, msg string }

// first reports whether the NACK (t, version, msg) is the first of its
// window, to be logged; a repeat is counted for the window's summary.
func (l *nackLog) first(t, version, msg string) bool {
	k := nackKey{t, version, msg}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.repeats == nil {
		l.repeats = map[nackKey]int{}
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(l.window, l.flush)
	}
	if n, ok := l.repeats[k]; ok {
		l.repeats[k] = n + 1
		return false
	}
	if len(l.repeats) >= maxNackKeys {
		l.dropped++
		return false
	}
	l.repeats[k] = 0
	return true
}

// flush ends the window: one line per NACK repeated in it.
func (l *nackLog) flush() {
	l.mu.Lock()
	repeats, dropped := l.repeats, l.dropped
	l.repeats, l.dropped, l.timer = nil, 0, nil
	l.mu.Unlock()
	for k, n := range repeats {
		if n > 0 {
			l.log.Warn("more clients rejected a response (NACK) with the same message", "count", n, "window", l.window, "type", k.typ, "version", k.version, "error", k.msg)
		}
	}
	if dropped > 0 {
		l.log.Warn("more NACKs not logged: too many distinct ones in the window", "count", dropped, "window", l.window)
	}
}
