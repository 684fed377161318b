package authz

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	rules      prometheus.Gauge
	badRules   prometheus.Gauge
	revision   prometheus.Gauge
	watchLosts prometheus.Counter
	reloads    prometheus.Counter
	staleTurns prometheus.Counter
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
		staleTurns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_authz_stale_total", Help: "Times the authorization rules turned stale (nothing heard from etcd for --authz-stale-after), closing the streams they allowed.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.rules, m.badRules, m.revision, m.watchLosts, m.reloads, m.staleTurns)
	}
	return m
}

// freshness registers the gauges read at scrape time from age (how long
// ago etcd last confirmed the rules; false before the first load) and
// the bound past which the rules are stale (zero: none).
func (m *metrics) freshness(reg prometheus.Registerer, age func() (time.Duration, bool), bound time.Duration) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "legation_authz_rules_age_seconds",
			Help: "Seconds since etcd last confirmed the authorization rules (a watch response, a progress notification or a load); 0 before the first load.",
		}, func() float64 {
			a, _ := age()
			return a.Seconds()
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "legation_authz_stale",
			Help: "1 while the authorization rules are stale (older than --authz-stale-after): new streams are refused with UNAVAILABLE; 0 otherwise.",
		}, func() float64 {
			if a, ok := age(); ok && bound > 0 && a > bound {
				return 1
			}
			return 0
		}),
	)
}
