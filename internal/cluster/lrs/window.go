package lrs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// Window is what one replica's nodes reported during one interval: one
// row per (cluster, EDS service, locality, node). It is the JSON value of
// one key "<prefix>load/<replica>/<start>".
type Window struct {
	// Replica is the replica that received the reports.
	Replica string `json:"replica"`
	// Start and End bound the window: reports received in [Start, End).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Rows are the counts, sorted by cluster, service, locality, node.
	Rows []Row `json:"rows"`
	// Folded counts the rows merged into a row of OtherNode or
	// OtherCluster because the window already held MaxRows.
	Folded uint64 `json:"folded,omitempty"`
}

// Row is the sum of the reports of one node for one cluster and locality
// in one window. Drops are reported per cluster, not per locality: they
// are in the row whose Locality is empty.
type Row struct {
	Cluster  string `json:"cluster"`
	Service  string `json:"service,omitempty"`
	Locality string `json:"locality,omitempty"`
	Node     string `json:"node"`
	// Identity is the identity of the client that reported for Node (its
	// certificate's; "" without mTLS, and in rows of OtherNode).
	Identity string `json:"identity,omitempty"`
	// Reports counts the cluster stats summed into the row.
	Reports    uint64 `json:"reports"`
	Issued     uint64 `json:"issued,omitempty"`
	Succeeded  uint64 `json:"succeeded,omitempty"`
	Errored    uint64 `json:"errored,omitempty"`
	InProgress uint64 `json:"in_progress,omitempty"` // as last reported
	Dropped    uint64 `json:"dropped,omitempty"`
	// DroppedBy is dropped_requests by category.
	DroppedBy map[string]uint64 `json:"dropped_by,omitempty"`
	// Metrics are the named load metrics (load_metric_stats).
	Metrics map[string]Metric `json:"metrics,omitempty"`
}

// Metric is the sum of one named load metric's reports.
type Metric struct {
	Requests uint64  `json:"requests"`
	Total    float64 `json:"total"`
}

// The names rows are folded into beyond MaxRows.
const (
	// OtherNode is the node of a row summing nodes beyond MaxRows.
	OtherNode = "(other)"
	// OtherCluster is the cluster (and node) of the row summing what
	// still did not fit.
	OtherCluster = "(other)"
)

// MaxRows bounds the rows of one window, and so the size of its etcd
// value (a row is at most a few hundred bytes, the names being bounded
// by maxName): beyond it a new node's row is folded into the cluster and
// locality's OtherNode row, and beyond twice it everything new into one
// OtherCluster row.
const MaxRows = 2000

// maxName bounds the cluster, service, locality and node names stored:
// longer ones are cut (a row's key stays bounded).
const maxName = 256

// maxCategories and maxMetrics bound the drop categories and the named
// load metrics kept per row; more are counted and skipped.
const (
	maxCategories = 16
	maxMetrics    = 16
)

type rowKey struct{ cluster, service, locality, node, identity string }

// window is a Window being filled. Not safe for concurrent use.
type window struct {
	start, end time.Time
	rows       map[rowKey]*Row
	folded     uint64
	// nodes is what each node (and identity) reported in the window, for
	// the per-node bounds.
	nodes map[nodeKey]*nodeUse
}

type nodeKey struct{ node, identity string }

// nodeUse is what one node reported in one window.
type nodeUse struct {
	node, identity string
	// requests is the sum of requestsOf of its accepted cluster stats;
	// rows, how many rows it made.
	requests uint64
	rows     int
}

func newWindow(start, end time.Time) *window {
	return &window{start: start, end: end, rows: map[rowKey]*Row{}, nodes: map[nodeKey]*nodeUse{}}
}

// use returns what the node of from reported in w so far.
func (w *window) use(from Reporter) *nodeUse {
	k := nodeKey{node: from.Node, identity: from.Identity}
	u := w.nodes[k]
	if u == nil {
		u = &nodeUse{node: from.Node, identity: from.Identity}
		w.nodes[k] = u
	}
	return u
}

// row returns the row of k, made if needed, folding beyond MaxRows.
func (w *window) row(k rowKey) *Row {
	if r, ok := w.rows[k]; ok {
		return r
	}
	if len(w.rows) >= MaxRows {
		w.folded++
		k.node, k.identity = OtherNode, ""
		if r, ok := w.rows[k]; ok {
			return r
		}
		if len(w.rows) >= 2*MaxRows {
			k = rowKey{cluster: OtherCluster, node: OtherNode}
			if r, ok := w.rows[k]; ok {
				return r
			}
		}
	}
	r := &Row{Cluster: k.cluster, Service: k.service, Locality: k.locality, Node: k.node, Identity: k.identity}
	w.rows[k] = r
	return r
}

// freeze returns the Window of w, its rows sorted.
func (w *window) freeze(replica string) Window {
	out := Window{Replica: replica, Start: w.start, End: w.end, Folded: w.folded, Rows: make([]Row, 0, len(w.rows))}
	for _, r := range w.rows {
		out.Rows = append(out.Rows, *r)
	}
	sort.Slice(out.Rows, func(i, j int) bool {
		a, b := out.Rows[i], out.Rows[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		if a.Locality != b.Locality {
			return a.Locality < b.Locality
		}
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Identity < b.Identity
	})
	return out
}

// add sums a into *p, saturating: a client reporting absurd counts
// cannot wrap a total around.
func add(p *uint64, a uint64) {
	if *p > math.MaxUint64-a {
		*p = math.MaxUint64
		return
	}
	*p += a
}

// LocalityName is how a locality is written in rows and shown:
// "region/zone/sub_zone", empty parts kept, "" for none.
func LocalityName(l *corev3.Locality) string {
	if l == nil || (l.GetRegion() == "" && l.GetZone() == "" && l.GetSubZone() == "") {
		return ""
	}
	return cut(l.GetRegion()) + "/" + cut(l.GetZone()) + "/" + cut(l.GetSubZone())
}

// cut bounds a name to maxName bytes.
func cut(s string) string {
	if len(s) <= maxName {
		return s
	}
	return s[:maxName]
}

// KeyPrefix is the etcd directory of every replica's windows under
// prefix: "<prefix>load/" (keyspace.Load).
func KeyPrefix(prefix string) string { return keyspace.Load.Prefix(prefix) }

// ReplicaPrefix is the directory of one replica's windows.
func ReplicaPrefix(prefix, replica string) string { return KeyPrefix(prefix) + replica + "/" }

// Key is the etcd key of replica's window starting at start: the start
// in Unix milliseconds, zero-padded so that keys sort by time.
func Key(prefix, replica string, start time.Time) string {
	return fmt.Sprintf("%s%020d", ReplicaPrefix(prefix, replica), start.UnixMilli())
}

// Encode is the etcd value of w.
func Encode(w Window) ([]byte, error) { return json.Marshal(w) }

// MaxWindowBytes bounds the etcd value of one window (EncodeBounded).
const MaxWindowBytes = 512 << 10

// EncodeBounded is Encode, coarsening w until its value fits
// MaxWindowBytes (long names from many nodes can make MaxRows rows too
// big): first its nodes are merged (node OtherNode, per cluster, service
// and locality), then its localities and load metrics (per cluster), then
// everything into one row of OtherCluster. The counts are kept.
func EncodeBounded(w Window) ([]byte, error) {
	for level := 0; ; level++ {
		b, err := Encode(w)
		if err != nil || len(b) <= MaxWindowBytes || level == 3 {
			return b, err
		}
		w = coarsen(w, level)
	}
}

// coarsen merges w's rows at level 0 (nodes), 1 (services, localities,
// metrics) or 2 (clusters).
func coarsen(w Window, level int) Window {
	nw := newWindow(w.Start, w.End)
	for _, r := range w.Rows {
		k := rowKey{cluster: r.Cluster, service: r.Service, locality: r.Locality, node: OtherNode}
		switch level {
		case 1:
			k = rowKey{cluster: r.Cluster, node: OtherNode}
		case 2:
			k = rowKey{cluster: OtherCluster, node: OtherNode}
		}
		m, ok := nw.rows[k]
		if !ok {
			m = &Row{Cluster: k.cluster, Service: k.service, Locality: k.locality, Node: k.node}
			nw.rows[k] = m
		}
		m.Reports += r.Reports
		add(&m.Issued, r.Issued)
		add(&m.Succeeded, r.Succeeded)
		add(&m.Errored, r.Errored)
		add(&m.InProgress, r.InProgress)
		add(&m.Dropped, r.Dropped)
		if level >= 2 {
			continue // no names: categories and metrics go
		}
		for c, n := range r.DroppedBy {
			if m.DroppedBy == nil {
				m.DroppedBy = map[string]uint64{}
			}
			if _, ok := m.DroppedBy[c]; ok || len(m.DroppedBy) < maxCategories {
				v := m.DroppedBy[c]
				add(&v, n)
				m.DroppedBy[c] = v
			}
		}
		if level >= 1 {
			continue
		}
		for name, v := range r.Metrics {
			if m.Metrics == nil {
				m.Metrics = map[string]Metric{}
			}
			if _, ok := m.Metrics[name]; ok || len(m.Metrics) < maxMetrics {
				mt := m.Metrics[name]
				add(&mt.Requests, v.Requests)
				mt.Total += v.Total
				if math.IsInf(mt.Total, 0) {
					mt.Total = math.Copysign(math.MaxFloat64, mt.Total) // JSON has no infinity
				}
				m.Metrics[name] = mt
			}
		}
	}
	out := nw.freeze(w.Replica)
	out.Folded = w.Folded + uint64(len(w.Rows))
	return out
}

// ErrMalformed is wrapped by Decode's errors.
var ErrMalformed = errors.New("lrs: malformed load window")

// Decode reads the window stored at key under prefix, checking that it
// is one: a replica and a window that ends after it starts, rows with a
// cluster and a node.
func Decode(prefix, key string, b []byte) (Window, error) {
	var w Window
	if err := json.Unmarshal(b, &w); err != nil {
		return Window{}, fmt.Errorf("%w at %s: %v", ErrMalformed, key, err)
	}
	rest := strings.TrimPrefix(key, KeyPrefix(prefix))
	replica, _, ok := strings.Cut(rest, "/")
	switch {
	case !ok || replica == "" || replica != w.Replica:
		return Window{}, fmt.Errorf("%w at %s: replica %q does not match the key", ErrMalformed, key, w.Replica)
	case w.Start.IsZero() || !w.End.After(w.Start):
		return Window{}, fmt.Errorf("%w at %s: window %s to %s", ErrMalformed, key, w.Start, w.End)
	}
	for i, r := range w.Rows {
		if r.Cluster == "" || r.Node == "" {
			return Window{}, fmt.Errorf("%w at %s: row %d has no cluster or node", ErrMalformed, key, i)
		}
	}
	return w, nil
}
