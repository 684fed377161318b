package lrs

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/store"
)

// BadWindow is a stored window that could not be read.
type BadWindow struct {
	Key string
	Err error
}

// readPage is how many windows Read asks etcd for at a time.
const readPage = 100

// Read returns every replica's windows under prefix, and the keys whose
// values could not be read (skipped). It reads at one revision, in pages.
func Read(ctx context.Context, c *clientv3.Client, prefix string) ([]Window, []BadWindow, error) {
	dir := KeyPrefix(prefix)
	var (
		out []Window
		bad []BadWindow
	)
	_, err := store.ReadPages(ctx, c, dir, readPage, func(kv *mvccpb.KeyValue) {
		w, err := Decode(prefix, string(kv.Key), kv.Value)
		if err != nil {
			bad = append(bad, BadWindow{Key: string(kv.Key), Err: err})
			return
		}
		out = append(out, w)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("lrs: read %s: %w", dir, err)
	}
	return out, bad, nil
}

// By is how Summarize groups the rows.
type By string

// The groupings of Summarize.
const (
	ByCluster  By = "cluster"
	ByLocality By = "locality"
	ByNode     By = "node"
)

// ParseBy checks a --by value ("" is ByCluster).
func ParseBy(s string) (By, error) {
	switch By(s) {
	case "", ByCluster:
		return ByCluster, nil
	case ByLocality, ByNode:
		return By(s), nil
	}
	return "", fmt.Errorf("--by %q: want cluster, locality or node", s)
}

// Summary is the load of one cluster (and locality or node, by By) over
// the last windows, cluster-wide.
type Summary struct {
	Cluster  string `json:"cluster"`
	Locality string `json:"locality,omitempty"`
	Node     string `json:"node,omitempty"`
	// Identity is the identity that reported for Node (by node only; ""
	// without mTLS).
	Identity string `json:"identity,omitempty"`
	// From and To bound the intervals summed; Seconds is their length
	// (the windows at the same start on several replicas count once).
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	Seconds float64   `json:"seconds"`
	// Windows is how many intervals were summed (with a window or not).
	Windows int `json:"windows"`
	// Replicas are the replicas whose nodes reported.
	Replicas   []string          `json:"replicas"`
	Issued     uint64            `json:"issued"`
	Succeeded  uint64            `json:"succeeded"`
	Errored    uint64            `json:"errored"`
	InProgress uint64            `json:"in_progress"` // in the last window
	Dropped    uint64            `json:"dropped"`
	DroppedBy  map[string]uint64 `json:"dropped_by,omitempty"`
	// RequestsPerSecond is Issued / Seconds; ErrorRatio is Errored /
	// (Succeeded + Errored), 0 when none finished; DropsPerSecond is
	// Dropped / Seconds.
	RequestsPerSecond float64 `json:"requests_per_second"`
	ErrorRatio        float64 `json:"error_ratio"`
	DropsPerSecond    float64 `json:"drops_per_second"`
}

// Summarize sums, across every replica, the windows of the last `last`
// intervals (all windows if last < 1), for cluster (all clusters if
// empty), grouped by by. The intervals end at the newest window's end,
// unless, at time now (if not zero), that is more than one interval ago:
// then they end one interval before now, so load that stopped shows as
// none rather than as its last rate. An interval in which no node
// reported has no window but counts in Seconds: a rate is over the time
// asked for, not over the windows that happen to exist. The result is
// sorted by cluster, locality, node; nil if no window falls in.
func Summarize(ws []Window, cluster string, by By, last int, now time.Time) []Summary {
	if len(ws) == 0 {
		return nil
	}
	sum := summing{span: summarySpan(ws, last, now), by: by, sums: map[summaryKey]*Summary{}, replicas: map[summaryKey]map[string]bool{}}
	for _, w := range ws {
		if !sum.span.holds(w) {
			continue
		}
		for i := range w.Rows {
			if cluster != "" && w.Rows[i].Cluster != cluster {
				continue
			}
			sum.add(w, &w.Rows[i])
		}
	}
	return sum.summaries()
}

// span is the time Summarize sums over: the intervals in [from, to),
// seconds long in all, slots of them, ending at the end of newest (or
// later).
type span struct {
	newest   Window
	from, to time.Time
	seconds  float64
	slots    int
}

// summarySpan is the span of Summarize's last intervals of ws (not
// empty) at time now (see Summarize).
func summarySpan(ws []Window, last int, now time.Time) span {
	// The newest window gives the end and the interval.
	newest := ws[0]
	oldest := ws[0].Start
	for _, w := range ws[1:] {
		if w.Start.After(newest.Start) || (w.Start.Equal(newest.Start) && w.End.After(newest.End)) {
			newest = w
		}
		if w.Start.Before(oldest) {
			oldest = w.Start
		}
	}
	length := newest.End.Sub(newest.Start)
	to := newest.End
	if !now.IsZero() {
		// The window that closed last may not be published yet: one
		// interval of lag is allowed.
		if recent := now.Truncate(length).Add(-length); to.Before(recent) {
			to = recent
		}
	}
	from := oldest
	if last > 0 {
		from = to.Add(-time.Duration(last) * length)
	}
	seconds := to.Sub(from).Seconds()
	slots := last
	if last < 1 {
		slots = int(math.Round(seconds / length.Seconds()))
	}
	return span{newest: newest, from: from, to: to, seconds: seconds, slots: slots}
}

// holds tells whether w starts within sp.
func (sp span) holds(w Window) bool { return !w.Start.Before(sp.from) && w.Start.Before(sp.to) }

// summaryKey is what Summarize groups rows by: the fields By leaves
// empty are.
type summaryKey struct{ cluster, locality, node, identity string }

// summing is Summarize's sums so far, by key, and the replicas whose
// windows added to each.
type summing struct {
	span     span
	by       By
	sums     map[summaryKey]*Summary
	replicas map[summaryKey]map[string]bool
}

// add adds r, a row of w, to the sum of its key.
func (a *summing) add(w Window, r *Row) {
	k := summaryKey{cluster: r.Cluster}
	switch a.by {
	case ByLocality:
		k.locality = r.Locality
		if k.locality == "" {
			k.locality = "-"
		}
	case ByNode:
		k.node, k.identity = r.Node, r.Identity
	}
	s := a.sums[k]
	if s == nil {
		sp := a.span
		s = &Summary{Cluster: k.cluster, Locality: k.locality, Node: k.node, Identity: k.identity, From: sp.from, To: sp.to, Seconds: sp.seconds, Windows: sp.slots}
		a.sums[k] = s
		a.replicas[k] = map[string]bool{}
	}
	a.replicas[k][w.Replica] = true
	add(&s.Issued, r.Issued)
	add(&s.Succeeded, r.Succeeded)
	add(&s.Errored, r.Errored)
	add(&s.Dropped, r.Dropped)
	if w.Start.Equal(a.span.newest.Start) {
		add(&s.InProgress, r.InProgress)
	}
	for c, n := range r.DroppedBy {
		if s.DroppedBy == nil {
			s.DroppedBy = map[string]uint64{}
		}
		v := s.DroppedBy[c]
		add(&v, n)
		s.DroppedBy[c] = v
	}
}

// summaries are the sums with their replicas and rates, sorted by
// cluster, locality, node and identity.
func (a *summing) summaries() []Summary {
	out := make([]Summary, 0, len(a.sums))
	for k, s := range a.sums {
		for r := range a.replicas[k] {
			s.Replicas = append(s.Replicas, r)
		}
		sort.Strings(s.Replicas)
		if s.Seconds > 0 {
			s.RequestsPerSecond = float64(s.Issued) / s.Seconds
			s.DropsPerSecond = float64(s.Dropped) / s.Seconds
		}
		if done := float64(s.Succeeded) + float64(s.Errored); done > 0 {
			s.ErrorRatio = float64(s.Errored) / done
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
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
