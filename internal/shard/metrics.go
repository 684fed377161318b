package shard

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	alive       prometheus.Gauge
	ringMembers prometheus.Gauge
	ringChanges prometheus.Counter
	leaseLost   prometheus.Counter
	badMeta     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		alive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_members_alive", Help: "Members memberlist considers alive, this replica included."}),
		ringMembers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_ring_members", Help: "Members on the hash ring (the ready ones, or all alive when none is ready)."}),
		ringChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_ring_changes_total", Help: "Times a new hash ring replaced the previous one."}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_registry_lease_lost_total", Help: "Times the registry lease was lost (expired or not kept alive) and registration started again."}),
		badMeta: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_bad_meta_total", Help: "Gossip members left off the ring because their meta did not decode."}),
	}
	if reg != nil {
		reg.MustRegister(m.alive, m.ringMembers, m.ringChanges, m.leaseLost, m.badMeta)
	}
	return m
}
