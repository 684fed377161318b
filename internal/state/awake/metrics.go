package awake

import "github.com/prometheus/client_golang/prometheus"

// metrics are a Clock's collectors.
type metrics struct {
	starvations prometheus.Counter
	starved     prometheus.Counter
}

// newMetrics makes the collectors and registers them with reg, if not
// nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		starvations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_awake_starvations_total",
			Help: "Times the process got no CPU for longer than the awake clock's threshold (its tick late): a freeze, CPU throttling or a pause; liveness detectors do not count that time against their peers.",
		}),
		starved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_awake_starved_seconds_total",
			Help: "Seconds the process was starved of CPU, as the awake clock saw it.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.starvations, m.starved} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
