package shard

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// DefaultVNodes is the number of virtual nodes per member when none is
// given. With 256, each of a few members owns its fair share of the hash
// space give or take about 5% (one standard deviation), and adding or
// removing one member moves about 1/N of the node ids.
const DefaultVNodes = 256

// Ring is an immutable consistent hash with virtual nodes over members. It
// is deterministic: the same members, in any order, give the same ring in
// every process, and the hash (xxhash64 of fixed byte layouts) never
// changes between releases, so replicas of different versions agree during
// a rolling upgrade. Its methods may be called concurrently.
type Ring struct {
	members []Member // sorted by name, names unique
	points  []point  // sorted by hash, then member index
	vnodes  int
	shares  map[string]float64
}

// point is one virtual node: the member owns the arc of the hash space that
// ends at hash (exclusive of the previous point, inclusive of this one).
type point struct {
	hash   uint64
	member int32 // index into Ring.members
}

// NewRing returns the ring of members with vnodes virtual nodes each; vnodes
// < 1 means DefaultVNodes. Of members sharing a name, the one started last
// is kept (ties broken by addresses), so the result does not depend on the
// order of members.
func NewRing(members []Member, vnodes int) *Ring {
	if vnodes < 1 {
		vnodes = DefaultVNodes
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int {
		// Within a name, the preferred record sorts first.
		return cmp.Or(
			cmp.Compare(a.Name, b.Name),
			b.Started.Compare(a.Started),
			cmp.Compare(a.GossipAddr, b.GossipAddr),
			cmp.Compare(a.XDSAddr, b.XDSAddr),
			cmp.Compare(a.HTTPAddr, b.HTTPAddr),
			boolCompare(a.Ready, b.Ready),
		)
	})
	ms = slices.CompactFunc(ms, func(a, b Member) bool { return a.Name == b.Name })

	r := &Ring{members: ms, vnodes: vnodes, points: make([]point, 0, len(ms)*vnodes)}
	var buf []byte
	for i, m := range ms {
		for v := range vnodes {
			buf = vnodeKey(buf[:0], m.Name, v)
			r.points = append(r.points, point{hash: xxhash.Sum64(buf), member: int32(i)})
		}
	}
	slices.SortFunc(r.points, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.member, b.member))
	})
	r.shares = r.computeShares()
	return r
}

// ReadyRing returns the ring replicas build from these alive members: over
// the Ready ones when they are a strict majority, else over all of them.
// A replica that alone lost etcd hands its nodes over; when most lost it
// (etcd itself is down) the homes stay where they are, on views that may
// be stale, instead of moving to whichever replica flips last (and back
// when etcd returns). `xdsadmin members` uses it on the registry to show
// the replicas' ring.
func ReadyRing(alive []Member, vnodes int) *Ring {
	ready := make([]Member, 0, len(alive))
	for _, m := range alive {
		if m.Ready {
			ready = append(ready, m)
		}
	}
	if 2*len(ready) <= len(alive) {
		return NewRing(alive, vnodes)
	}
	return NewRing(ready, vnodes)
}

// vnodeKey is the hashed identity of virtual node v of the member called
// name: the name, a zero byte (names hold none), v as 4 big-endian bytes.
func vnodeKey(buf []byte, name string, v int) []byte {
	buf = append(buf, name...)
	buf = append(buf, 0)
	return binary.BigEndian.AppendUint32(buf, uint32(v))
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// Home returns the member that owns nodeID: the owner of the first virtual
// node at or after the id's hash, wrapping around. It is false only when
// the ring is empty.
func (r *Ring) Home(nodeID string) (Member, bool) {
	if len(r.points) == 0 {
		return Member{}, false
	}
	h := xxhash.Sum64String(nodeID)
	i, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint64) int { return cmp.Compare(p.hash, h) })
	if i == len(r.points) {
		i = 0
	}
	return r.members[r.points[i].member], true
}

// HomeExcluding returns the home of nodeID on this ring without the
// members skip says to leave out: the next member clockwise. It is the
// home the node would have on the ring rebuilt without them, so a stream
// whose home is unreachable can go where it will end up once the home is
// declared dead. False when every member is skipped.
func (r *Ring) HomeExcluding(nodeID string, skip func(name string) bool) (Member, bool) {
	if len(r.points) == 0 {
		return Member{}, false
	}
	h := xxhash.Sum64String(nodeID)
	i, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint64) int { return cmp.Compare(p.hash, h) })
	for n := 0; n < len(r.points); n++ {
		m := r.members[r.points[(i+n)%len(r.points)].member]
		if !skip(m.Name) {
			return m, true
		}
	}
	return Member{}, false
}

// Members returns the ring's members sorted by name. The slice is a copy.
func (r *Ring) Members() []Member { return slices.Clone(r.members) }

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.members) }

// VNodes returns the number of virtual nodes per member.
func (r *Ring) VNodes() int { return r.vnodes }

// Shares returns, per member name, the fraction of the hash space it owns:
// about the fraction of node ids it is home to. The fractions sum to 1
// (an empty ring gives an empty map). The map is a copy.
func (r *Ring) Shares() map[string]float64 {
	out := make(map[string]float64, len(r.shares))
	for k, v := range r.shares {
		out[k] = v
	}
	return out
}

func (r *Ring) computeShares() map[string]float64 {
	shares := make(map[string]float64, len(r.members))
	switch len(r.members) {
	case 0:
		return shares
	case 1:
		shares[r.members[0].Name] = 1
		return shares
	}
	const space = float64(math.MaxUint64) + 1
	// Each point owns the arc from the previous point (exclusive) to it;
	// the first point's arc wraps around from the last one, which unsigned
	// subtraction does by itself.
	prev := r.points[len(r.points)-1].hash
	for _, p := range r.points {
		shares[r.members[p.member].Name] += float64(p.hash-prev) / space
		prev = p.hash
	}
	return shares
}

// equal reports whether r and o have the same members (every field) and
// virtual nodes, and so the same homes.
func (r *Ring) equal(o *Ring) bool {
	if r == nil || o == nil {
		return r == o
	}
	return r.vnodes == o.vnodes && slices.EqualFunc(r.members, o.members, Member.equal)
}
