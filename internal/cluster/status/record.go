package status

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Dir returns the directory of the status records under prefix:
// "<prefix>status/" (keyspace.Status).
func Dir(prefix string) string { return keyspace.Status.Prefix(prefix) }

// Key returns the key of nodeID's record: "<prefix>status/<node id>", the
// id kept raw (it may hold '/').
func Key(prefix, nodeID string) string { return keyspace.Status.Key(prefix, nodeID) }

// MaxNackBytes bounds a record's LastNack: a client's error message can be
// long (a whole proto validation dump), and records must stay small next
// to the configuration they describe.
const MaxNackBytes = 512

// maxNodeIDLen bounds the node ids that get a record; a longer id (Envoy's
// are host names or pod names) would make a key large enough to fail the
// batch it is in, so it gets none.
const maxNodeIDLen = 1024

// NodeStatus is the status of one Envoy node id across the streams one
// replica serves for it. It is the JSON value of the node's record.
type NodeStatus struct {
	NodeID string `json:"node_id"`
	// Group is the node's group (the scope it reads), empty if unknown.
	Group string `json:"group,omitempty"`
	// Home is the name of the replica serving the node's streams.
	Home string `json:"home"`
	// Protocols are the kinds of the node's streams, sorted: "sotw-ads",
	// "delta-ads", "sotw-cluster", "delta-endpoint", ...
	Protocols []string `json:"protocols"`
	// ConnectedSince is when the earliest of the node's streams opened.
	ConnectedSince time.Time `json:"connected_since"`
	// Streams is the number of the node's streams.
	Streams int `json:"streams"`
	// Types holds, by type short name ("cluster", "endpoint", ...), the
	// state of the type on the most recent stream that carries it.
	Types map[string]TypeStatus `json:"types,omitempty"`
}

// TypeStatus is a node's state for one resource type. Versions are SotW
// version_info or delta system_version_info: etcd revisions, "" when none.
type TypeStatus struct {
	VersionSent  string `json:"version_sent,omitempty"`
	VersionAcked string `json:"version_acked,omitempty"`
	// NackVersion is the version the client rejected, when its latest
	// answer was a NACK; LastNack is its message, at most MaxNackBytes.
	NackVersion string `json:"nack_version,omitempty"`
	LastNack    string `json:"last_nack,omitempty"`
	// Resources is the number of resources the client holds.
	Resources int `json:"resources,omitempty"`
}

// Nacked reports whether the client's latest answer for the type was a
// NACK.
func (t TypeStatus) Nacked() bool { return t.NackVersion != "" || t.LastNack != "" }

// streamView is the part of one SotW or delta stream's status a record
// is made of.
type streamView struct {
	connected time.Time
	protocol  string
	id        uint64
	group     string
	types     map[string]xdsstream.TypeSummary // the Summary's, read only
}

// FromStreams merges the streams of each node id into one record whose
// home is replica, sorted by node id. Streams without a node id (no first
// request yet) are skipped. Where two streams of a node carry the same
// type, the one connected last wins: the other is usually a stream the
// client is abandoning. It only reads its arguments, which may be the
// servers' SummariesOf copies.
func FromStreams(replica string, servers ...[]xdsstream.Summary) []NodeStatus {
	n := 0
	for _, streams := range servers {
		n += len(streams)
	}
	byNode := make(map[string][]streamView, n)
	for _, streams := range servers {
		for _, s := range streams {
			if s.NodeID == "" {
				continue
			}
			v := streamView{connected: s.ConnectedAt, protocol: s.Protocol, id: s.ID, group: s.Group, types: s.Types}
			byNode[s.NodeID] = append(byNode[s.NodeID], v)
		}
	}

	out := make([]NodeStatus, 0, len(byNode))
	for id, views := range byNode {
		slices.SortFunc(views, func(a, b streamView) int {
			return cmp.Or(a.connected.Compare(b.connected), strings.Compare(a.protocol, b.protocol), cmp.Compare(a.id, b.id))
		})
		ns := NodeStatus{NodeID: id, Home: replica, Streams: len(views), ConnectedSince: views[0].connected.UTC().Truncate(time.Millisecond)}
		for _, v := range views {
			if !slices.Contains(ns.Protocols, v.protocol) {
				ns.Protocols = append(ns.Protocols, v.protocol)
			}
			if v.group != "" {
				ns.Group = v.group // the latest stream's
			}
			for name, t := range v.types {
				if ns.Types == nil {
					ns.Types = make(map[string]TypeStatus, len(v.types))
				}
				ns.Types[name] = TypeStatus{
					VersionSent: t.VersionSent, VersionAcked: t.VersionAcked,
					NackVersion: t.NackVersion, LastNack: truncate(t.LastNack, MaxNackBytes),
					Resources: t.Resources,
				}
			}
		}
		slices.Sort(ns.Protocols)
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut
// with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// ErrMalformed is wrapped by the errors about record values that cannot be
// read.
var ErrMalformed = errors.New("status: malformed record")

// encode returns the record's value. Field order is fixed and map keys are
// sorted, so an unchanged record encodes to the same bytes.
func encode(ns NodeStatus) []byte {
	b, err := json.Marshal(ns)
	if err != nil {
		// Strings, ints, a time of now and maps of those: Marshal cannot
		// fail.
		panic(fmt.Sprintf("status: encode record of %q: %v", ns.NodeID, err))
	}
	return b
}

// Decode reads the record value found at the key of nodeID. A record
// without a node id takes the key's; one naming another node, or without
// a home, is malformed. Errors wrap ErrMalformed. It never panics.
func Decode(nodeID string, value []byte) (NodeStatus, error) {
	if !utf8.ValidString(nodeID) {
		// Node ids are proto strings: the writer never writes such a key.
		return NodeStatus{}, fmt.Errorf("%w: node id %q is not UTF-8", ErrMalformed, nodeID)
	}
	var ns NodeStatus
	d := json.NewDecoder(bytes.NewReader(value))
	if err := d.Decode(&ns); err != nil {
		return NodeStatus{}, fmt.Errorf("%w: node %q: %v", ErrMalformed, nodeID, err)
	}
	if d.More() {
		return NodeStatus{}, fmt.Errorf("%w: node %q: data after the record", ErrMalformed, nodeID)
	}
	if ns.NodeID == "" {
		ns.NodeID = nodeID
	}
	if len(ns.Types) == 0 {
		ns.Types = nil // as the writer leaves it
	}
	switch {
	case ns.NodeID != nodeID:
		return NodeStatus{}, fmt.Errorf("%w: key of node %q holds the record of %q", ErrMalformed, nodeID, ns.NodeID)
	case ns.Home == "":
		return NodeStatus{}, fmt.Errorf("%w: node %q: no home", ErrMalformed, nodeID)
	case ns.Streams < 0:
		return NodeStatus{}, fmt.Errorf("%w: node %q: %d streams", ErrMalformed, nodeID, ns.Streams)
	}
	return ns, nil
}
