package xdsstream

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/view"
)

// Promise 8: a client that reads TTLs gets, with each TTL'd resource, the
// time its lease has left; when the lease is extended (a refresh, or found
// extended just before it expires) the client gets a heartbeat at the
// version it holds. The core keeps, per type, the TTL'd resources a client
// holds and which are due a heartbeat; how a heartbeat looks, and when one
// may go, is the protocol's.

// Item is one resource in a response: its entry, and the VHDS alias it
// was asked by, if any.
type Item struct {
	Entry *view.Entry
	Alias string
}

// Key is the name the client holds the resource by: the alias, else the
// resource's name.
func (it Item) Key() string {
	if it.Alias != "" {
		return it.Alias
	}
	return it.Entry.Name
}

// TTLHeld is one resource a client holds with a TTL.
type TTLHeld struct {
	Item
	// Version is the resource's version the client holds (its
	// mod_revision).
	Version string
	// Expires is when the client drops it, unless heartbeated.
	Expires time.Time
}

// ttlSet is what a client holds with a TTL of one type, by Item.Key.
type ttlSet struct {
	held map[string]TTLHeld
	beat map[string]bool // lease extended: to heartbeat
}

// WireTTLs returns the TTL to send with each of n entries (entry(i) is
// the i-th), nil when none is TTL'd or the client does not read TTLs.
func (s *Stream[T]) WireTTLs(n int, entry func(i int) *view.Entry) []time.Duration {
	if !s.TTLOn {
		return nil
	}
	var ttls []time.Duration
	var now time.Time
	leases := s.core.Config.Leases
	for i := range n {
		e := entry(i)
		if e.Lease == 0 {
			continue
		}
		if ttls == nil {
			ttls = make([]time.Duration, n)
			now = time.Now()
			if s.notice == nil {
				// Taken before the expiry, so an extension after it
				// is not missed.
				s.notice = leases.Notice()
			}
		}
		ttls[i] = lease.WireTTL(leases.Expiry(s.Ctx, e), now)
	}
	return ttls
}

// TTLKey extends key, a response's shared-cache key, with the TTLs sent
// with its resources: streams sending the same content with the same
// TTLs, within one lease.Quantum, share the encoding.
func TTLKey(key string, ttls []time.Duration) string {
	if ttls == nil || key == "" {
		return key
	}
	b := []byte(key + "\x00T")
	for _, d := range ttls {
		b = append(b, 0)
		b = strconv.AppendInt(b, int64(d), 10)
	}
	return string(b)
}

// HeartbeatKey is the shared-cache key of a heartbeat of type t at
// version ver: prefix (the protocol's form of heartbeat), then each
// resource due, by scope, name, revision and alias, with the TTL sent
// (ttls[i] for due[i]).
func HeartbeatKey(prefix string, t *resource.Type, ver string, due []TTLHeld, ttls []time.Duration) string {
	var b strings.Builder
	b.WriteString(prefix + "\x00" + t.Name + "\x00" + ver)
	for i, h := range due {
		e := h.Entry
		b.WriteString("\x00" + e.Scope + "/" + e.Name + "@" + strconv.FormatInt(e.ModRevision, 10) + "~" + h.Alias + "~" + strconv.FormatInt(int64(ttls[i]), 10))
	}
	return b.String()
}

// RecordTTLs records what of the n items just sent (item(i) is the i-th)
// the client holds with a TTL, and until when: ttls as WireTTLs returned
// them. A resource sent again carries a fresh TTL, so it is no longer due
// a heartbeat. It costs nothing when neither the response nor the type
// has TTL'd resources.
func (s *Stream[T]) RecordTTLs(t *resource.Type, n int, item func(i int) Item, ttls []time.Duration) {
	set := s.ttl[t]
	if ttls == nil && (set == nil || len(set.held) == 0) {
		return
	}
	if set == nil {
		if s.ttl == nil {
			s.ttl = map[*resource.Type]*ttlSet{}
		}
		set = &ttlSet{held: map[string]TTLHeld{}, beat: map[string]bool{}}
		s.ttl[t] = set
	}
	now := time.Now()
	for i := range n {
		it := item(i)
		k := it.Key()
		delete(set.beat, k)
		if ttls != nil && ttls[i] > 0 {
			set.held[k] = TTLHeld{Item: it, Version: strconv.FormatInt(it.Entry.ModRevision, 10), Expires: now.Add(ttls[i])}
		} else {
			delete(set.held, k)
		}
	}
	s.pruneTTL(t, set)
}

// pruneTTL drops from set what the client no longer holds, and updates
// the stream's share of the TTL'd resources gauge.
func (s *Stream[T]) pruneTTL(t *resource.Type, set *ttlSet) {
	for k, h := range set.held {
		if !s.holds(t, k, h) {
			delete(set.held, k)
			delete(set.beat, k)
		}
	}
	n := 0
	for _, set := range s.ttl {
		n += len(set.held)
	}
	s.core.Metrics.TTLResources.Add(float64(n - s.ttlCount))
	s.ttlCount = n
}

// leasesExtended takes the lease extensions announced since the stream
// last looked and marks the TTL'd resources they cover for a heartbeat.
func (s *Stream[T]) leasesExtended() {
	var ext map[int64]bool
	ext, s.notice = lease.Extended(s.notice)
	for t, set := range s.ttl {
		if len(set.held) == 0 {
			continue
		}
		s.pruneTTL(t, set)
		for k, h := range set.held {
			if ext[h.Entry.Lease] {
				set.beat[k] = true
			}
		}
	}
}

// Heartbeats sends the heartbeats due: for each type, in make-before-break
// order, whose leases were extended and for which ready says a heartbeat
// may go now, send is called with the resources to heartbeat, sorted by
// the name the client holds them by. send must send them with fresh TTLs
// and record them (RecordTTLs), which clears them from what is due.
func (s *Stream[T]) Heartbeats(ready func(*resource.Type) bool, send func(*resource.Type, []TTLHeld) error) error {
	if len(s.ttl) == 0 {
		return nil
	}
	for _, t := range resource.All() {
		set := s.ttl[t]
		if set == nil || len(set.beat) == 0 || !ready(t) {
			continue
		}
		s.pruneTTL(t, set)
		if len(set.beat) == 0 {
			continue
		}
		due := make([]TTLHeld, 0, len(set.beat))
		for k := range set.beat {
			due = append(due, set.held[k])
		}
		sort.Slice(due, func(i, j int) bool { return due[i].Key() < due[j].Key() })
		s.core.Metrics.Heartbeats.WithLabelValues(t.Name).Inc()
		if err := send(t, due); err != nil {
			return err
		}
		clear(set.beat)
	}
	return nil
}

// ttlStatus lists the TTL'd resources of type t, by name; tracked is
// false when the type never had one.
func (s *Stream[T]) ttlStatus(t *resource.Type) (out []TTLStatus, tracked bool) {
	set := s.ttl[t]
	if set == nil {
		return nil, false
	}
	if len(set.held) == 0 {
		return nil, true
	}
	out = make([]TTLStatus, 0, len(set.held))
	for k, h := range set.held {
		out = append(out, TTLStatus{Type: t.Name, Name: k, Lease: fmt.Sprintf("%016x", h.Entry.Lease), Expires: h.Expires.UTC(), Pending: set.beat[k]})
	}
	return sortedTTL(out), true
}
