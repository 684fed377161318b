package authz

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	rules      prometheus.Gauge
	badRules   prometheus.Gauge
	revision   prometheus.Gauge
	watchLosts prometheus.Counter
	reloads    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_authz_rules", Help: "Valid authorization rules in the replica's table.",
		}),
		badRules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_authz_bad_rules", Help: "Values under <prefix>authz/ skipped because they are not valid rules.",
		}),
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_authz_revision", Help: "etcd revision of the replica's authorization table.",
		}),
		watchLosts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_authz_watch_restarts_total", Help: "Times the watch of the authorization rules ended (error, stall, compaction) and was restarted.",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_authz_reloads_total", Help: "Full reads of the authorization rules (the first load included).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.rules, m.badRules, m.revision, m.watchLosts, m.reloads)
	}
	return m
}
