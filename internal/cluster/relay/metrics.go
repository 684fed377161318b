package relay

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	relayed         prometheus.Gauge
	fallbacks       prometheus.Counter
	rebalanceCloses prometheus.Counter
	drainCloses     prometheus.Counter
	shedCloses      prometheus.Counter
	untrusted       prometheus.Counter
	sendTimeouts    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		relayed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_relay_streams_relayed", Help: "xDS streams being relayed from this replica to their home replica."}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_relay_fallbacks_total", Help: "Streams served locally because their home replica could not be reached."}),
		rebalanceCloses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_relay_rebalance_closes_total", Help: "Streams closed because their home replica moved."}),
		drainCloses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_relay_drain_closes_total", Help: "Streams closed because this replica is draining (shutting down)."}),
		shedCloses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_relay_shed_closes_total", Help: "Streams closed because this replica held more than its share of the cluster's streams (--max-streams-share)."}),
		untrusted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_relay_untrusted_markers_total", Help: "Streams carrying a relay marker from a peer that is not a replica, treated as any client's."}),
		sendTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_relay_send_timeouts_total", Help: "Relayed streams ended because their client took no message for --send-timeout."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.relayed, m.fallbacks, m.rebalanceCloses, m.drainCloses, m.shedCloses, m.untrusted, m.sendTimeouts} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("relay: metrics: %w", err)
			}
		}
	}
	return m, nil
}
