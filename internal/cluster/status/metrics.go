package status

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	written   prometheus.Counter
	bytes     prometheus.Counter
	deleted   prometheus.Counter
	txns      prometheus.Counter
	errors    prometheus.Counter
	leaseLost prometheus.Counter
	held      prometheus.Gauge
	takenOver prometheus.Counter
	budget    prometheus.Gauge
	dirty     prometheus.Gauge
	deferred  prometheus.Counter
	coalesced prometheus.Counter

	rejectedNodes   *prometheus.GaugeVec
	rejectedByApply *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_records_written_total", Help: "Node status records written to etcd (only changed ones are)."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_written_bytes_total", Help: "Bytes of keys and values of the status records written."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_records_deleted_total", Help: "Status records deleted because their node left this replica."}),
		txns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_txns_total", Help: "etcd transactions that wrote or deleted status records."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_write_errors_total", Help: "Failed status writes, deletes, lease grants and checks (retried on the next round)."}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_lease_lost_total", Help: "Times the status lease was lost and every record written again under a new one."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_status_records", Help: "Status records this replica holds in etcd."}),
		takenOver: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_records_taken_over_total", Help: "Records this replica wrote that another replica (or tool) wrote over or deleted since: left alone, or written again while the node is still here."}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_status_write_budget_txns_per_second", Help: "The status write budget: etcd transactions per second this replica commits at most (--status-write-budget)."}),
		dirty: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_status_records_dirty", Help: "Record writes and deletes the write budget left for the next rounds, after the last round."}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_records_deferred_total", Help: "Record writes and deletes the write budget left for a later round, counted once per round left."}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_status_updates_coalesced_total", Help: "Record values the write budget held back that a newer value replaced (or the node left) before they were written: writes saved."}),
		rejectedNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "legation_xds_rejected_nodes", Help: "Nodes this replica is home to whose latest answer for the type is a NACK, as their status records say; the fleet's count is the sum over the replicas."},
			[]string{"type"}),
		rejectedByApply: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "legation_xds_rejected_nodes_by_apply", Help: "Nodes this replica is home to that reject what the apply (its id, as xdsadmin history and nacks name it) wrote, for the 10 most recent applies with rejections only (an apply's series goes when it falls out of them); the fleet's count is the sum over the replicas."},
			[]string{"apply"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.written, m.bytes, m.deleted, m.txns, m.errors, m.leaseLost, m.held, m.takenOver, m.budget, m.dirty, m.deferred, m.coalesced, m.rejectedNodes, m.rejectedByApply}
}

// register registers the collectors on reg (nil: nothing), all or none.
func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for i, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors()[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("status: register metrics: %w", err)
		}
	}
	return nil
}

// csdsMetrics are CSDS's: its cache of the records and its refusals.
type csdsMetrics struct {
	records         prometheus.Gauge
	reloads         prometheus.Counter
	matchersRefused prometheus.Counter
}

func newCSDSMetrics(reg prometheus.Registerer) (*csdsMetrics, error) {
	m := &csdsMetrics{
		records: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_csds_cache_records", Help: "Node status records in the replica's CSDS cache, kept current by a watch of the status directory (0 until the first CSDS call)."}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_csds_cache_reloads_total", Help: "Full reads of the status directory into the CSDS cache: the first, and one after each watch that failed or was compacted."}),
		matchersRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_csds_matchers_refused_total", Help: "CSDS requests refused with INVALID_ARGUMENT for holding more node matchers than --max-csds-matchers."}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.records, m.reloads, m.matchersRefused}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("status: register CSDS metrics: %w", err)
		}
	}
	return m, nil
}
