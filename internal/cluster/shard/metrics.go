package shard

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reg         prometheus.Registerer // nil: not registered
	alive       prometheus.Gauge
	ringMembers prometheus.Gauge
	// registered: members registered in etcd under a live lease;
	// unregistered: alive in gossip but left off the ring for not being.
	registered   prometheus.Gauge
	unregistered prometheus.Gauge
	share        prometheus.Gauge // this replica's share of the ring
	ringChanges  prometheus.Counter
	leaseLost    prometheus.Counter
	badMeta      prometheus.Counter
	// deaths: members memberlist declared dead (or that left); revived:
	// those of them alive again within RingDamping; damped: dead ones
	// still on the ring (damping.go).
	deaths  prometheus.Counter
	revived prometheus.Counter
	damped  prometheus.Gauge
	// confirmed: deaths confirmed by a refused connection.
	confirmed prometheus.Counter
	// rebalancePauses: rebalances put off because this replica was
	// overloaded (Agent).
	rebalancePauses prometheus.Counter
	keys            prometheus.Gauge   // keys in the gossip keyring
	keyReloads      prometheus.Counter // key file changes applied
	keyErrors       prometheus.Counter // key file re-reads that failed
}

func newMetrics() *metrics {
	return &metrics{
		alive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_members_alive", Help: "Members memberlist considers alive, this replica included."}),
		ringMembers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_ring_members", Help: "Members on the hash ring: those alive and registered in etcd (the ready ones of them, or all when most are not ready)."}),
		registered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_members_registered", Help: "Members registered in etcd under a live lease (<prefix>members/), as this replica's registry watch last saw them."}),
		unregistered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_members_unregistered", Help: "Members gossip knows as alive that are not registered in etcd under a live lease with the addresses they gossip: left off the ring."}),
		share: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_ring_share", Help: "This replica's share of the hash ring (0 to 1): about the fraction of node ids it is home to."}),
		ringChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_ring_changes_total", Help: "Times a new hash ring replaced the previous one."}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_registry_lease_lost_total", Help: "Times the registry lease was lost (expired or not kept alive) and registration started again."}),
		badMeta: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_bad_meta_total", Help: "Gossip members left off the ring because their meta did not decode."}),
		deaths: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_member_deaths_total", Help: "Times memberlist declared a member dead or gone (its probes failed and the suspicion was not refuted in time, or it left); the member stays on the ring for --ring-damping unless its registration ends."}),
		revived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_member_revivals_total", Help: "Members declared dead that were alive again within --ring-damping: deaths that moved no node."}),
		damped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_members_damped", Help: "Members declared dead but kept on the ring while --ring-damping runs and their registration is live."}),
		confirmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_member_deaths_confirmed_total", Help: "Deaths confirmed at once because the member's xDS address refused a connection (no process listens there): the member left the ring without waiting out --ring-damping."}),
		rebalancePauses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_rebalance_pauses_total", Help: "Times the rebalance after a ring change was put off because this replica was overloaded (starved of CPU, or memberlist's local health degraded), for at most 30s."}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_shard_gossip_keys", Help: "Keys in the gossip keyring (--gossip-key-file); 0: gossip is not encrypted."}),
		keyReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_gossip_key_file_reloads_total", Help: "Times a changed gossip key file was read and its keys put in the keyring."}),
		keyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_shard_gossip_key_file_errors_total", Help: "Times a changed gossip key file could not be read or parsed; the keyring in use was kept."}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.alive, m.ringMembers, m.registered, m.unregistered, m.share, m.ringChanges, m.leaseLost, m.badMeta, m.deaths, m.revived, m.damped, m.confirmed, m.rebalancePauses, m.keys, m.keyReloads, m.keyErrors}
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
			return fmt.Errorf("shard: register metrics: %w", err)
		}
	}
	m.reg = reg
	return nil
}

// unregister undoes register, so that a later Membership can register on
// the same registry.
func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors() {
		m.reg.Unregister(c)
	}
	m.reg = nil
}
