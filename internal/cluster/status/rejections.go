package status

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/store"
)

// RejectionApply is an apply a group of rejections is traced to.
type RejectionApply struct {
	ID        string    `json:"id"`
	Revision  int64     `json:"revision"`
	By        string    `json:"by"`
	At        time.Time `json:"at"`
	Message   string    `json:"message,omitempty"`
	Resources []string  `json:"resources"`
	// Traceparent is the apply's trace context (W3C traceparent), empty
	// when traces were off; not shown.
	Traceparent string `json:"-"`
}

// Rejection is the nodes that reject the same type from the same applies
// with the same message.
type Rejection struct {
	// Applies are those that wrote what the nodes reject, oldest first;
	// empty when the history does not cover the versions.
	Applies []RejectionApply `json:"applies"`
	Type    string           `json:"type"`
	Nack    string           `json:"nack"`
	Nodes   int              `json:"nodes"`
	// NodeIDs are the first MaxRejectionNodeIDs of them; Replicas their
	// homes, sorted.
	NodeIDs  []string `json:"node_ids"`
	Replicas []string `json:"replicas"`
}

// MaxRejectionNodeIDs is how many node ids a Rejection names.
const MaxRejectionNodeIDs = 5

// Rejections groups the standing rejections of recs (each node's types
// whose latest answer was a NACK) by the applies of history (newest
// first, as store.History reads it) they trace to, type and message,
// most nodes first.
func Rejections(recs []NodeStatus, history []store.HistoryRecord) []Rejection {
	byKey := map[string]*Rejection{}
	var order []string
	for _, ns := range recs {
		for t, ts := range ns.Types {
			if !ts.Nacked() {
				continue
			}
			applies := TraceNack(history, ns.Group, t, ts)
			ids := make([]string, len(applies))
			for i, ap := range applies {
				ids[i] = ap.ID
			}
			key := strings.Join(ids, ",") + "\x00" + t + "\x00" + ts.LastNack
			g, ok := byKey[key]
			if !ok {
				g = &Rejection{Applies: applies, Type: t, Nack: ts.LastNack, NodeIDs: []string{}, Replicas: []string{}}
				byKey[key] = g
				order = append(order, key)
			}
			g.Nodes++
			g.NodeIDs = append(g.NodeIDs, ns.NodeID)
			if !slices.Contains(g.Replicas, ns.Home) {
				g.Replicas = append(g.Replicas, ns.Home)
			}
		}
	}
	out := make([]Rejection, 0, len(order))
	for _, k := range order {
		g := byKey[k]
		slices.Sort(g.Replicas)
		slices.Sort(g.NodeIDs)
		g.NodeIDs = g.NodeIDs[:min(len(g.NodeIDs), MaxRejectionNodeIDs)]
		out = append(out, *g)
	}
	slices.SortStableFunc(out, func(x, y Rejection) int {
		if d := y.Nodes - x.Nodes; d != 0 {
			return d
		}
		return strings.Compare(rejectionKey(x), rejectionKey(y))
	})
	return out
}

// rejectionKey orders groups of as many nodes: by type, message, then
// applies.
func rejectionKey(r Rejection) string {
	var b strings.Builder
	b.WriteString(r.Type + "\x00" + r.Nack)
	for _, ap := range r.Applies {
		b.WriteString("\x00" + ap.ID)
	}
	return b.String()
}

// TraceNack is the applies of history, oldest first, that wrote what a
// node of group rejects in ts: after the version it acknowledged, up to
// the one it rejects, resources of type t in its group or the default
// scope.
func TraceNack(history []store.HistoryRecord, group, t string, ts TypeStatus) []RejectionApply {
	nacked, err := strconv.ParseInt(ts.NackVersion, 10, 64)
	if err != nil {
		return []RejectionApply{}
	}
	acked, _ := strconv.ParseInt(ts.VersionAcked, 10, 64) // "": none yet
	out := []RejectionApply{}
	for i := len(history) - 1; i >= 0; i-- { // oldest first
		r := history[i]
		if r.Revision <= acked || r.Revision > nacked {
			continue
		}
		var res []string
		for _, c := range r.Changes {
			if c.Type == t && (c.Scope == store.DefaultScope || c.Scope == group) {
				res = append(res, c.Type+"/"+c.Scope+"/"+c.Name)
			}
		}
		if len(res) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].ID == r.ID {
			out[n-1].Resources = append(out[n-1].Resources, res...)
			out[n-1].Revision = r.Revision
			continue
		}
		out = append(out, RejectionApply{ID: r.ID, Revision: r.Revision, By: r.By, At: r.At, Message: r.Message,
			Resources: res, Traceparent: r.Traceparent})
	}
	return out
}

// ReadRejections reads every node's status record and the apply history
// under prefix, and groups the standing rejections (Rejections); bad
// counts the status and history records that did not decode.
func ReadRejections(ctx context.Context, c *clientv3.Client, prefix string) (groups []Rejection, bad int, err error) {
	recs, malformed, err := Read(ctx, c, prefix)
	if err != nil {
		return nil, 0, err
	}
	history, badHistory, err := store.ReadHistory(ctx, c, prefix, 0)
	if err != nil {
		return nil, 0, err
	}
	return Rejections(recs, history), len(malformed) + len(badHistory), nil
}

// RecentRejections keeps the groups traced to an apply written after
// from.
func RecentRejections(groups []Rejection, from time.Time) []Rejection {
	out := []Rejection{}
	for _, g := range groups {
		if slices.ContainsFunc(g.Applies, func(ap RejectionApply) bool { return ap.At.After(from) }) {
			out = append(out, g)
		}
	}
	return out
}
