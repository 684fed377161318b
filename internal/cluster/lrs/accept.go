package lrs

import (
	"math"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
)

// Reporter is who sent a load report: the node id its stream claimed,
// the node's group, and the identity of the stream's client ("" without
// one).
type Reporter struct {
	Node     string
	Identity string
	Group    string
}

// Accept adds the cluster stats of one report from a node to the current
// window. What is bad in it is skipped and counted; it never fails. It
// may be called concurrently.
func (s *Server) Accept(from Reporter, req *loadv3.LoadStatsRequest) {
	stats := req.GetClusterStats()
	if len(stats) == 0 {
		return
	}
	s.metrics.reports.Inc()
	if len(stats) > s.cfg.MaxClusters {
		s.metrics.rejected.WithLabelValues("too_many_clusters").Add(float64(len(stats) - s.cfg.MaxClusters))
		stats = stats[:s.cfg.MaxClusters]
	}
	// Checked before the lock: Known reads the view.
	ok := make([]bool, len(stats))
	for i, cs := range stats {
		ok[i] = s.check(from.Group, cs)
	}
	now := s.now()
	overRate := false
	s.mu.Lock()
	w := s.windowAt(now)
	use := w.use(from)
	for i, cs := range stats {
		if !ok[i] {
			continue
		}
		n := requestsOf(cs)
		if n > s.budget || use.requests > s.budget-n {
			s.metrics.rejected.WithLabelValues("over_rate").Inc()
			overRate = true
			continue
		}
		use.requests += n
		s.add(w, use, cs)
	}
	s.mu.Unlock()
	if overRate {
		s.warnOverRate(from, now)
	}
}

// warnOverRate logs, at most once a window, that a node's report went
// over --lrs-max-rate.
func (s *Server) warnOverRate(from Reporter, now time.Time) {
	win := now.Truncate(s.cfg.Interval).UnixNano()
	if last := s.warnedWindow.Load(); last == win || !s.warnedWindow.CompareAndSwap(last, win) {
		return
	}
	s.log.Warn("refused load reports over --lrs-max-rate (counted in legation_lrs_rejected_total{reason=\"over_rate\"}; logged once a window)",
		"node", from.Node, "identity", from.Identity, "max_rate", s.cfg.MaxRate)
}

// requestsOf is how many requests cs claims, saturating: per locality the
// most of issued, finished (succeeded plus errored), in progress and each
// load metric's finished requests, plus the most of the total drops and
// the sum of the drops by category. A client that reports absurd numbers
// in any of them is over any budget.
func requestsOf(cs *endpointv3.ClusterStats) uint64 {
	var n, cats uint64
	for _, d := range cs.GetDroppedRequests() {
		add(&cats, d.GetDroppedCount())
	}
	add(&n, max(cs.GetTotalDroppedRequests(), cats))
	for _, ls := range cs.GetUpstreamLocalityStats() {
		done := ls.GetTotalSuccessfulRequests()
		add(&done, ls.GetTotalErrorRequests())
		m := max(ls.GetTotalIssuedRequests(), done, ls.GetTotalRequestsInProgress())
		for _, lm := range ls.GetLoadMetricStats() {
			m = max(m, lm.GetNumRequestsFinishedWithMetric())
		}
		add(&n, m)
	}
	return n
}

// check says whether cs may be added: a cluster name the node can see
// and a sane interval.
func (s *Server) check(group string, cs *endpointv3.ClusterStats) bool {
	name := cs.GetClusterName()
	if name == "" {
		s.metrics.rejected.WithLabelValues("no_cluster").Inc()
		return false
	}
	iv := cs.GetLoadReportInterval()
	if iv == nil || iv.CheckValid() != nil {
		s.metrics.rejected.WithLabelValues("bad_interval").Inc()
		return false
	}
	if d := iv.AsDuration(); d <= 0 || d > maxReportInterval {
		s.metrics.rejected.WithLabelValues("bad_interval").Inc()
		return false
	}
	if s.cfg.Known != nil && !s.cfg.Known(group, name) {
		s.metrics.rejected.WithLabelValues("unknown_cluster").Inc()
		return false
	}
	return true
}

// add adds cs, reported by the node of use, to w. s.mu is held.
func (s *Server) add(w *window, use *nodeUse, cs *endpointv3.ClusterStats) {
	cluster, service := cut(cs.GetClusterName()), cut(cs.GetClusterServiceName())
	label := s.metrics.cluster(cluster)

	// Drops are per cluster: the row without a locality.
	dropRow := s.rowOf(w, use, rowKey{cluster: cluster, service: service})
	dropRow.Reports++
	s.addDrops(dropRow, label, cs)

	locs := cs.GetUpstreamLocalityStats()
	if len(locs) > s.cfg.MaxLocalities {
		s.metrics.rejected.WithLabelValues("too_many_localities").Add(float64(len(locs) - s.cfg.MaxLocalities))
		locs = locs[:s.cfg.MaxLocalities]
	}
	for _, ls := range locs {
		loc := LocalityName(ls.GetLocality())
		r := dropRow
		if loc != "" {
			r = s.rowOf(w, use, rowKey{cluster: cluster, service: service, locality: loc})
			r.Reports++
		}
		s.addRequests(r, label, ls)
		s.addMetrics(r, ls)
	}
}

// addDrops adds the drops of cs, in total and by category (at most
// maxCategories of them), to r, the row of its cluster without a
// locality. s.mu is held.
func (s *Server) addDrops(r *Row, label string, cs *endpointv3.ClusterStats) {
	dropped := cs.GetTotalDroppedRequests()
	add(&r.Dropped, dropped)
	s.metrics.dropped.WithLabelValues(label).Add(float64(dropped))
	cats := cs.GetDroppedRequests()
	if len(cats) > maxCategories {
		s.metrics.rejected.WithLabelValues("too_many_categories").Add(float64(len(cats) - maxCategories))
		cats = cats[:maxCategories]
	}
	for _, d := range cats {
		if r.DroppedBy == nil {
			r.DroppedBy = map[string]uint64{}
		}
		cat := cut(d.GetCategory())
		if _, ok := r.DroppedBy[cat]; !ok && len(r.DroppedBy) >= maxCategories {
			s.metrics.rejected.WithLabelValues("too_many_categories").Inc()
			continue
		}
		c := r.DroppedBy[cat]
		add(&c, d.GetDroppedCount())
		r.DroppedBy[cat] = c
	}
}

// addRequests adds the request counts of one locality's stats to r, its
// row. s.mu is held.
func (s *Server) addRequests(r *Row, label string, ls *endpointv3.UpstreamLocalityStats) {
	add(&r.Issued, ls.GetTotalIssuedRequests())
	add(&r.Succeeded, ls.GetTotalSuccessfulRequests())
	add(&r.Errored, ls.GetTotalErrorRequests())
	r.InProgress = ls.GetTotalRequestsInProgress()
	s.metrics.requests.WithLabelValues(label, "issued").Add(float64(ls.GetTotalIssuedRequests()))
	s.metrics.requests.WithLabelValues(label, "succeeded").Add(float64(ls.GetTotalSuccessfulRequests()))
	s.metrics.requests.WithLabelValues(label, "errored").Add(float64(ls.GetTotalErrorRequests()))
}

// addMetrics adds the named load metrics of one locality's stats to r,
// its row: at most maxMetrics names, finite values only. s.mu is held.
func (s *Server) addMetrics(r *Row, ls *endpointv3.UpstreamLocalityStats) {
	for _, m := range ls.GetLoadMetricStats() {
		v := m.GetTotalMetricValue()
		if math.IsNaN(v) || math.IsInf(v, 0) {
			s.metrics.rejected.WithLabelValues("bad_metric").Inc()
			continue
		}
		name := cut(m.GetMetricName())
		if r.Metrics == nil {
			r.Metrics = map[string]Metric{}
		}
		mt, ok := r.Metrics[name]
		if !ok && len(r.Metrics) >= maxMetrics {
			s.metrics.rejected.WithLabelValues("too_many_metrics").Inc()
			continue
		}
		add(&mt.Requests, m.GetNumRequestsFinishedWithMetric())
		mt.Total += v
		if math.IsInf(mt.Total, 0) {
			mt.Total = math.Copysign(math.MaxFloat64, mt.Total) // JSON has no infinity
		}
		r.Metrics[name] = mt
	}
}

// rowOf returns the row of k (without its node and identity) for the
// node of use: beyond MaxRowsPerNode rows of its own in w, the node's new
// rows are summed into one row of cluster OtherCluster, still its own.
// s.mu is held.
func (s *Server) rowOf(w *window, use *nodeUse, k rowKey) *Row {
	k.node, k.identity = use.node, use.identity
	if r, ok := w.rows[k]; ok {
		return r
	}
	if use.rows >= s.cfg.MaxRowsPerNode {
		s.metrics.rejected.WithLabelValues("node_rows_folded").Inc()
		k = rowKey{cluster: OtherCluster, node: use.node, identity: use.identity}
		if r, ok := w.rows[k]; ok {
			return r
		}
	}
	use.rows++
	return w.row(k)
}
