package replica

import (
	"fmt"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/legation-io/legation"
)

// NewRegistry returns the registry xds-node serves on /metrics, before the
// node registers its own: with the Go runtime's and the process's
// collectors (go_*, process_*).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

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
	version, revision, goVersion := buildInfo()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "legation_build_info",
		Help:        "Always 1; its labels say which build runs: Legation's version, the VCS revision and the Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	info.Set(1)
	for _, c := range []prometheus.Collector{g, info} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("node: register metrics: %w", err)
		}
	}
	return nil
}

// buildInfo is the labels of legation_build_info: Legation's version
// (CHANGELOG.md's latest release, as `xds-node --version` prints it), the
// VCS revision (with "-dirty" when the tree was modified; "unknown" when
// not stamped, as in tests) and the Go version.
func buildInfo() (version, revision, goVersion string) {
	b := legation.BuildInfo()
	return orUnknown(b.Version), orUnknown(b.Revision), orUnknown(b.GoVersion)
}

// orUnknown is s, or "unknown" when s is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// grpcMetrics are go-grpc-middleware's gRPC server metrics
// (grpc_server_started_total, grpc_server_handled_total and the message
// counters), registered on reg. The handling-time histogram stays off:
// an xDS stream lives for hours, so its duration says nothing.
func grpcMetrics(reg prometheus.Registerer) (*grpcprom.ServerMetrics, error) {
	m := grpcprom.NewServerMetrics()
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("node: register gRPC metrics: %w", err)
	}
	return m, nil
}
