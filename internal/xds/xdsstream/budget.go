package xdsstream

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/xds/limits"
)

// NameOverhead is what a subscribed name costs beyond its bytes, in
// MaxSubscribedBytes: the string header and the set entries that keep
// it (about 64 bytes on 64-bit), so that a million one-byte names are
// not cheap.
const NameOverhead = 64

// NameCost is what subscribing to n costs (MaxSubscribedBytes); "*", the
// wildcard, costs nothing.
func NameCost(n string) int {
	if n == "*" {
		return 0
	}
	return len(n) + NameOverhead
}

// NamesCost is the sum of NameCost over names.
func NamesCost(names []string) int {
	c := 0
	for _, n := range names {
		c += NameCost(n)
	}
	return c
}

// subscriptionCost is what a stream's subscriptions cost, per type and
// in all.
type subscriptionCost struct {
	byType map[*resource.Type]int
	total  int
}

// ChargeNames sets what the names type t subscribes to cost (NameCost
// summed) to cost, or, when the stream's subscriptions of every type
// together would then cost more than MaxSubscribedBytes, or those of
// every stream of its connection more than MaxSubscribedBytesPerConn,
// returns RESOURCE_EXHAUSTED naming the bound and its flag and changes
// nothing (field names the request's field, for the message). Call it
// before a subscription grows, and after it shrinks.
func (s *Stream[T]) ChargeNames(t *resource.Type, field string, cost int) error {
	c := &s.subscribed
	delta := cost - c.byType[t]
	total := c.total + delta
	if b := s.core.Config.MaxSubscribedBytes; delta > 0 && !b.Allows(total) {
		max, _ := b.Limit()
		s.core.Metrics.LimitHits.WithLabelValues(LimitSubscribed).Inc()
		return status.Errorf(codes.ResourceExhausted, "%s %s: the stream's subscriptions over all types would cost %d bytes (names and %d bytes each), more than the bound of %d per stream (--max-subscribed-bytes-per-stream)",
			t.Name, field, total, NameOverhead, max)
	}
	connMax, _ := s.core.Config.MaxSubscribedBytesPerConn.Limit()
	if !limits.ChargeConn(s.Ctx, int64(delta), int64(connMax)) {
		s.core.Metrics.LimitHits.WithLabelValues(LimitSubscribedConn).Inc()
		return status.Errorf(codes.ResourceExhausted, "%s %s: the subscriptions of the connection's streams would cost more than the bound of %d bytes per connection (--max-subscribed-bytes-per-conn)",
			t.Name, field, connMax)
	}
	if c.byType == nil {
		c.byType = map[*resource.Type]int{}
	}
	c.byType[t], c.total = cost, total
	return nil
}

// releaseNames gives back what the stream's subscriptions cost its
// connection, once it ends.
func (s *Stream[T]) releaseNames() {
	limits.ChargeConn(s.Ctx, -int64(s.subscribed.total), 0)
	s.subscribed = subscriptionCost{}
}
