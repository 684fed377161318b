package xdsstream

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
)

// Reporter is a protocol's per-type stream status: shown as it is in
// /debug/streams, and summarized for node status records.
type Reporter interface {
	Summary() TypeSummary
}

// Status describes one stream for /debug/streams.
type Status[T Reporter] struct {
	ID          uint64        `json:"id"`
	NodeID      string        `json:"node_id"`
	Group       string        `json:"group"`
	Protocol    string        `json:"protocol"`
	ConnectedAt time.Time     `json:"connected_at"`
	Types       map[string]*T `json:"types"`
	// TTLResources lists the resources the client holds with a TTL.
	TTLResources []TTLStatus `json:"ttl_resources,omitempty"`
}

// TTLStatus is one resource a client holds with a TTL.
type TTLStatus = lease.TTLStatus

// Summary is what a stream reports whatever its protocol: what node status
// records and CSDS are made of.
type Summary struct {
	ID          uint64
	NodeID      string
	Group       string
	Protocol    string
	ConnectedAt time.Time
	Types       map[string]TypeSummary
}

// TypeSummary is a stream's state for one type. Versions are SotW
// version_info or delta system_version_info, "" when none.
type TypeSummary struct {
	VersionSent  string
	VersionAcked string
	// NackVersion is the version the client rejected, when its latest
	// answer was a NACK; LastNack is its message.
	NackVersion string
	LastNack    string
	// Resources is the number of resources the client holds.
	Resources int
}

// Summary summarizes s.
func (s Status[T]) Summary() Summary {
	out := Summary{ID: s.ID, NodeID: s.NodeID, Group: s.Group, Protocol: s.Protocol, ConnectedAt: s.ConnectedAt,
		Types: make(map[string]TypeSummary, len(s.Types))}
	for name, t := range s.Types {
		if t != nil {
			out.Types[name] = (*t).Summary()
		}
	}
	return out
}

// statusBox is the copy of a stream's status that other goroutines read.
// Its methods may be called concurrently.
type statusBox[T Reporter] struct {
	mu   sync.Mutex // guards stat and ttl
	stat Status[T]
	ttl  map[string][]TTLStatus // per type, what stat.TTLResources is made of
	// gen is the server's status generation (Core.StatusGeneration),
	// bumped by every change.
	gen *atomic.Uint64
	// own counts this stream's changes (guarded by mu): a status writer
	// rebuilds the record of a node only when one of its streams' moved.
	own uint64
}

func (b *statusBox[T]) setNode(id, group string) {
	b.mu.Lock()
	b.stat.NodeID, b.stat.Group = id, group
	b.own++
	b.mu.Unlock()
	b.gen.Add(1)
}

// stamp returns the stream's node id and its count of changes.
func (b *statusBox[T]) stamp() (node string, own uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stat.NodeID, b.own
}

// set records the status of type t. It is updated in place: a push
// allocates no status. ttl is nil when the type has no TTL'd resources
// tracked.
func (b *statusBox[T]) set(t *resource.Type, v T, ttl []TTLStatus, tracked bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.gen.Add(1)
	b.own++
	if b.stat.Types == nil {
		b.stat.Types = map[string]*T{}
	}
	p := b.stat.Types[t.Name]
	if p == nil {
		p = new(T) // once per type: v itself stays on the caller's stack
		b.stat.Types[t.Name] = p
	}
	*p = v
	if tracked {
		if b.ttl == nil {
			b.ttl = map[string][]TTLStatus{}
		}
		b.ttl[t.Name] = ttl
	}
}

// get returns a copy; next gives the time of a lease's next check, nil
// when leases are not tracked.
func (b *statusBox[T]) get(next func(int64) time.Time) Status[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.stat
	out.Types = make(map[string]*T, len(b.stat.Types))
	for k, v := range b.stat.Types {
		c := *v
		out.Types[k] = &c
	}
	out.TTLResources = lease.StatusList(b.ttl, next)
	return out
}

// summary returns the stream's Summary when want selects its node id (nil
// want: any), and false otherwise or before the stream's first request.
// It copies under the lock only what a Summary holds.
func (b *statusBox[T]) summary(want func(node string) bool) (Summary, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stat.NodeID == "" || want != nil && !want(b.stat.NodeID) {
		return Summary{}, false
	}
	return b.stat.Summary(), true
}

// sortedTTL is the status list of one type's TTL'd resources, by name.
func sortedTTL(out []TTLStatus) []TTLStatus {
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
