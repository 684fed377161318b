package status

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// A Writer counts the standing rejections of the nodes it holds from the
// records it builds (a node's record says which types it rejects now),
// so the counts cost no read of the status directory: each replica
// counts the nodes it is home to, and the fleet's count is the sum over
// the replicas. It traces them to the applies of the history's most
// recent records, read again only when a node rejects a version newer
// than the last read covered.

// DefaultRejectedApplies is how many applies get a count of the nodes
// rejecting what they wrote when Config.RejectedApplies is zero.
const DefaultRejectedApplies = 10

// rejectedHistoryRecords bounds the history read to trace rejections:
// its most recent records (a record can hold 256 KiB of bodies).
const rejectedHistoryRecords = 32

// rejectedRetry is the least time between two reads of the history
// after one failed.
const rejectedRetry = time.Second

// maxNackEvents bounds the rejections held back while the history
// cannot be read; the oldest are dropped.
const maxNackEvents = 10000

// NackEvent is a rejection a Writer's records newly hold: the node's
// latest answer for the type became a NACK of Status.NackVersion with
// Status.LastNack (Config.OnNack).
type NackEvent struct {
	NodeID string
	Group  string
	Type   string
	Status TypeStatus
	// Applies are those the rejection traces to (TraceNack) among the
	// history's most recent records, oldest first; empty when those do
	// not cover its versions.
	Applies []RejectionApply
}

// rejected is the standing rejections of the nodes a Writer holds, and
// what they trace to. Owned by Run's goroutine.
type rejected struct {
	nodes   map[string]nodeRejections // node id -> its rejected types; only nodes with one
	changed bool                      // nodes changed since the counts were last set
	news    []NackEvent               // rejections new since the last publish (with Config.OnNack)
	// history is the most recent records, newest first, read at etcd
	// revision covered; readAt is the last read, failed or not.
	history []store.HistoryRecord
	covered int64
	readAt  time.Time
	failed  bool
	reads   atomic.Uint64   // reads of the history (tests)
	applies map[string]bool // label values of the per-apply gauge set
}

// nodeRejections is what a node rejects now: its group, and the status
// of each type whose latest answer was a NACK.
type nodeRejections struct {
	group string
	types map[string]TypeStatus
}

// setRejected takes what r, a record just built, rejects.
func (w *Writer) setRejected(r NodeStatus) {
	x := &w.rejected
	old := x.nodes[r.NodeID]
	now := nodeRejections{group: r.Group}
	for t, ts := range r.Types {
		if !ts.Nacked() {
			continue
		}
		if now.types == nil {
			now.types = map[string]TypeStatus{}
		}
		now.types[t] = ts
		prev, ok := old.types[t]
		if w.cfg.OnNack != nil && (!ok || prev.NackVersion != ts.NackVersion || prev.LastNack != ts.LastNack) {
			x.news = append(x.news, NackEvent{NodeID: r.NodeID, Group: r.Group, Type: t, Status: ts})
		}
	}
	if !sameRejections(old, now) {
		x.changed = true
	}
	if now.types == nil {
		delete(x.nodes, r.NodeID)
		return
	}
	x.nodes[r.NodeID] = now
}

// sameRejections reports whether a and b trace to the same applies.
func sameRejections(a, b nodeRejections) bool {
	if a.group != b.group || len(a.types) != len(b.types) {
		return false
	}
	for t, x := range a.types {
		y, ok := b.types[t]
		if !ok || x.NackVersion != y.NackVersion || x.VersionAcked != y.VersionAcked || x.LastNack != y.LastNack {
			return false
		}
	}
	return true
}

// forgetRejected forgets the nodes no longer served here (not in
// w.stamps).
func (w *Writer) forgetRejected() {
	for id := range w.rejected.nodes {
		if _, ok := w.stamps[id]; !ok {
			delete(w.rejected.nodes, id)
			w.rejected.changed = true
		}
	}
}

// publishRejected reads the history again if a rejected version is newer
// than it covers, tells Config.OnNack of the new rejections, and sets the
// gauges if the rejections changed.
func (w *Writer) publishRejected(ctx context.Context) {
	x := &w.rejected
	if !x.changed && len(x.news) == 0 && !x.failed {
		return
	}
	read := false
	newest := x.newestNack()
	if newest > x.covered && (!x.failed || time.Since(x.readAt) >= rejectedRetry) {
		rctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
		h, _, rev, err := store.ReadHistoryRev(rctx, w.cfg.Client, w.cfg.Prefix, rejectedHistoryRecords)
		cancel()
		x.reads.Add(1)
		x.readAt, x.failed = time.Now(), err != nil
		if err != nil {
			w.log.Debug("status: reading the history to trace rejections", "err", err)
		} else {
			x.history, x.covered, read = h, rev, true
		}
	}
	if newest > x.covered {
		// Not traced yet: the next round tries again, and the nodes
		// are counted then.
		if n := len(x.news); n > maxNackEvents {
			x.news = slices.Delete(x.news, 0, n-maxNackEvents)
		}
		return
	}
	x.failed = false
	for _, ev := range x.news {
		ev.Applies = TraceNack(x.history, ev.Group, ev.Type, ev.Status)
		w.cfg.OnNack(ev)
	}
	x.news = x.news[:0]
	if x.changed || read {
		w.countRejected()
		x.changed = false
	}
}

// newestNack is the newest version the nodes reject.
func (x *rejected) newestNack() int64 {
	var newest int64
	for _, n := range x.nodes {
		for _, ts := range n.types {
			if v, err := strconv.ParseInt(ts.NackVersion, 10, 64); err == nil && v > newest {
				newest = v
			}
		}
	}
	return newest
}

// countRejected sets the gauges: the nodes rejecting each type, and the
// nodes rejecting what each of the RejectedApplies most recent applies
// with rejections wrote. Labels of applies no longer among them are
// deleted.
func (w *Writer) countRejected() {
	x := &w.rejected
	byType := map[string]int{}
	type applyCount struct {
		rev   int64
		nodes int
	}
	byApply := map[string]*applyCount{}
	type traceKey struct{ group, typ, acked, nacked string }
	traced := map[traceKey][]RejectionApply{} // TraceNack's, once per key
	var ids []string
	for _, n := range x.nodes {
		ids = ids[:0]
		for t, ts := range n.types {
			byType[t]++
			key := traceKey{n.group, t, ts.VersionAcked, ts.NackVersion}
			aps, ok := traced[key]
			if !ok {
				aps = TraceNack(x.history, n.group, t, ts)
				traced[key] = aps
			}
			for _, ap := range aps {
				if slices.Contains(ids, ap.ID) {
					continue // a node counts once per apply
				}
				ids = append(ids, ap.ID)
				c := byApply[ap.ID]
				if c == nil {
					c = &applyCount{}
					byApply[ap.ID] = c
				}
				c.nodes++
				c.rev = max(c.rev, ap.Revision)
			}
		}
	}
	for _, t := range resource.All() {
		w.metrics.rejectedNodes.WithLabelValues(t.Name).Set(float64(byType[t.Name]))
	}
	recent := make([]string, 0, len(byApply))
	for id := range byApply {
		recent = append(recent, id)
	}
	slices.SortFunc(recent, func(a, b string) int {
		return cmp.Or(cmp.Compare(byApply[b].rev, byApply[a].rev), strings.Compare(a, b))
	})
	recent = recent[:min(len(recent), w.cfg.RejectedApplies)]
	kept := make(map[string]bool, len(recent))
	for _, id := range recent {
		kept[id] = true
		w.metrics.rejectedByApply.WithLabelValues(id).Set(float64(byApply[id].nodes))
	}
	for id := range x.applies {
		if !kept[id] {
			w.metrics.rejectedByApply.DeleteLabelValues(id)
		}
	}
	x.applies = kept
}
