package limits_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/xds/limits"
)

// TestRelayBudget: relayed (trusted) streams skip --stream-rate and
// --max-streams but count against their own budget: beyond
// --max-relayed-streams open, and beyond --relay-stream-rate's burst,
// they get RESOURCE_EXHAUSTED naming the flag, counted in
// legation_limits_hits_total; the client streams' budget is untouched.
func TestRelayBudget(t *testing.T) {
	tests := []struct {
		name  string
		cfg   limits.Config
		flag  string
		limit string
		want  int // relayed streams admitted of 10, all held open
	}{
		{"cap", limits.Config{MaxRelayedStreams: 4}, "--max-relayed-streams", limits.LimitMaxRelayedStreams, 4},
		{"rate", limits.Config{RelayStreamRate: 0.001, RelayStreamBurst: 3}, "--relay-stream-rate", limits.LimitRelayStreamRate, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			cfg := tt.cfg
			cfg.Registerer = reg
			// The client budget would refuse all but one: relayed streams
			// must not use it.
			cfg.StreamRate, cfg.StreamBurst, cfg.MaxStreams = 0.001, 1, 1
			cfg.Trusted = func(context.Context) bool { return true }
			l, err := limits.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var releases []limits.Release
			refused := 0
			for range 10 {
				release, err := l.AdmitStream(t.Context(), "/x/Stream")
				if err != nil {
					if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), tt.flag) {
						t.Fatalf("refused with %v, want RESOURCE_EXHAUSTED naming %s", err, tt.flag)
					}
					refused++
					continue
				}
				releases = append(releases, release)
			}
			if got := len(releases); got != tt.want {
				t.Errorf("admitted %d relayed streams of 10, want %d", got, tt.want)
			}
			hits, _ := limits.Hits(reg)
			if got := value(t, hits.WithLabelValues(tt.limit)); got != float64(refused) {
				t.Errorf("hits{limit=%s} = %v, want %d", tt.limit, got, refused)
			}
			if got := gauge(t, reg, "legation_admission_relayed_streams"); got != float64(tt.want) {
				t.Errorf("legation_admission_relayed_streams = %v, want %d", got, tt.want)
			}
			if got := gathered(t, reg, "legation_admission_relayed_admitted_total"); got != float64(tt.want) {
				t.Errorf("legation_admission_relayed_admitted_total = %v, want %d", got, tt.want)
			}
			if got := gathered(t, reg, "legation_admission_admitted_total"); got != 0 {
				t.Errorf("legation_admission_admitted_total = %v, want 0: relayed streams used the client budget", got)
			}
			for _, r := range releases {
				r(false)
			}
			if got := gauge(t, reg, "legation_admission_relayed_streams"); got != 0 {
				t.Errorf("legation_admission_relayed_streams after release = %v, want 0", got)
			}
		})
	}
}

// gauge is the value of the unlabelled gauge name on reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
