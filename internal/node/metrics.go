package node

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// newMetrics registers the node's own metrics. ready reports the state
// /readyz serves; it is read at scrape time, so the gauge never lags it.
func newMetrics(reg prometheus.Registerer, ready func() bool) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "legation_node_ready",
		Help: "1 when the replica is ready (its view is loaded and it is not shutting down), else 0.",
	}, func() float64 {
		if ready() {
			return 1
		}
		return 0
	})
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("node: register metrics: %w", err)
	}
	return nil
}
