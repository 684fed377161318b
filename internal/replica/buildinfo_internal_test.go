package replica

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation"
)

// TestBuildInfoVersion: legation_build_info's version label is Legation's
// version, CHANGELOG.md's latest release, as `xds-node --version` says.
func TestBuildInfoVersion(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := newMetrics(reg, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "legation_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != legation.Version() || labels["revision"] == "" || labels["goversion"] == "" {
			t.Errorf("legation_build_info labels %v; want version %q, a revision and a Go version", labels, legation.Version())
		}
		return
	}
	t.Fatal("no legation_build_info")
}
