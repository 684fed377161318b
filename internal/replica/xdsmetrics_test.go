package replica_test

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// pushed is what pushAndAck saw: the control_plane of every response.
type pushed struct {
	controlPlanes []*corev3.ControlPlane
}

// pushAndAck opens a SotW and a delta ADS stream on r, each subscribing
// to every cluster (node ids m-sotw and m-delta), ACKs their first
// responses, then applies two changes of a cluster and ACKs each push on
// both streams. It leaves the streams open with nothing more to come.
func pushAndAck(t *testing.T, e *xdsEnv, r *running) pushed {
	t.Helper()
	var p pushed
	cc := dial(t, r)
	s := xdstest.OpenSotW(t, cc)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("m-sotw", "c1"), TypeUrl: resource.Cluster.URL})
	cds := s.ExpectType(resource.Cluster)
	p.controlPlanes = append(p.controlPlanes, cds.GetControlPlane())
	s.Ack(cds)
	d := xdstest.OpenDelta(t, cc)
	d.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("m-delta", "c1"), TypeUrl: resource.Cluster.URL})
	dcds := d.ExpectType(resource.Cluster)
	p.controlPlanes = append(p.controlPlanes, dcds.GetControlPlane())
	d.Ack(dcds)
	for i := range 2 {
		e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster(fmt.Sprint("m", i), 100))})
		cds := s.ExpectType(resource.Cluster)
		p.controlPlanes = append(p.controlPlanes, cds.GetControlPlane())
		s.Ack(cds)
		dcds := d.ExpectType(resource.Cluster)
		p.controlPlanes = append(p.controlPlanes, dcds.GetControlPlane())
		d.Ack(dcds)
	}
	s.ExpectNone()
	d.ExpectNone()
	return p
}

// TestXDSMetrics: on a real replica, each change ACKed by a SotW and a
// delta client moves the convergence histogram once per protocol (first
// responses, which carry no change, do not); a push is timed once the
// next change goes out; every response counts its size; every SotW,
// delta and REST-JSON response names the replica in
// control_plane.identifier; the gRPC server metrics count the streams.
func TestXDSMetrics(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.Name = "replica-m"
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	r := start(t, cfg)
	waitReady(t, r)

	p := pushAndAck(t, e, r)
	_, rest, body := fetchREST(t, r, "/v3/discovery:clusters", &discoveryv3.DiscoveryRequest{Node: xdstest.Node("m-rest", "c1")})
	if rest == nil {
		t.Fatalf("REST-JSON poll failed: %s", body)
	}
	p.controlPlanes = append(p.controlPlanes, rest.GetControlPlane())
	for i, cp := range p.controlPlanes {
		if cp.GetIdentifier() != "replica-m" {
			t.Errorf("response %d: control_plane %v, want identifier replica-m", i, cp)
		}
	}

	for _, proto := range []string{"sotw", "delta"} {
		labels := []string{"protocol", proto, "type", resource.Cluster.Name}
		// ACKs are taken after the client sent them: wait for both.
		xdstest.WaitFor(t, proto+" convergence observed twice", func() (bool, string) {
			n, _ := xdstest.HistogramCount(t, reg, "legation_xds_convergence_seconds", labels...)
			return n >= 2, fmt.Sprint(n, " observations")
		})
		n, sum := xdstest.HistogramCount(t, reg, "legation_xds_convergence_seconds", labels...)
		if n != 2 || sum <= 0 || sum > 2*xdstest.Timeout.Seconds() {
			t.Errorf("%s: convergence %d observations summing %gs, want 2 (one per change ACKed, none for first responses), above 0 and within the test", proto, n, sum)
		}
		if n, sum := xdstest.HistogramCount(t, reg, "legation_xds_push_seconds", labels...); n != 1 || sum < 0 {
			t.Errorf("%s: push time %d observations summing %gs, want 1 (the first change's, observed when the second went out)", proto, n, sum)
		}
		if n, sum := xdstest.HistogramCount(t, reg, "legation_xds_response_size_bytes", labels...); n != 3 || sum <= 0 {
			t.Errorf("%s: response sizes %d observations summing %g bytes, want 3 responses", proto, n, sum)
		}
		if got := xdstest.CounterSum(t, reg, "legation_"+proto+"_responses_total", "type", resource.Cluster.Name); got != 3 {
			t.Errorf("legation_%s_responses_total{type=cluster} = %g, want 3", proto, got)
		}
	}
	if n, _ := xdstest.HistogramCount(t, reg, "legation_xds_response_size_bytes", "protocol", "rest", "type", resource.Cluster.Name); n != 1 {
		t.Errorf("rest: response sizes %d observations, want 1", n)
	}
	for _, m := range []string{"StreamAggregatedResources", "DeltaAggregatedResources"} {
		if got := xdstest.CounterSum(t, reg, "grpc_server_started_total", "grpc_method", m); got != 1 {
			t.Errorf("grpc_server_started_total{grpc_method=%s} = %g, want 1", m, got)
		}
		// The first request and three ACKs.
		if got := xdstest.CounterSum(t, reg, "grpc_server_msg_received_total", "grpc_method", m); got != 4 {
			t.Errorf("grpc_server_msg_received_total{grpc_method=%s} = %g, want 4", m, got)
		}
	}
}
