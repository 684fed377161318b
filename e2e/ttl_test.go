package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/store"
)

// The cluster and endpoints svc-b, on backend B: where the override sends
// xds:///svc.
const clusterBYAML = `"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: svc-b
type: EDS
eds_cluster_config:
  eds_config:
    ads: {}
    resource_api_version: V3
  service_name: svc-b
connect_timeout: 1s
lb_policy: ROUND_ROBIN
`

func endpointsBYAML(port int) string {
	return strings.Replace(endpointsYAML(port), "cluster_name: svc-cluster", "cluster_name: svc-b", 1)
}

// routeToBYAML is svc-route sending everything to svc-b.
var routeToBYAML = strings.Replace(routeYAML, "cluster: svc-cluster", "cluster: svc-b", 1)

// ttlTypes are the types a grpc-go client of xds:///svc subscribes to.
var ttlTypes = []string{"listener", "route", "cluster", "endpoint"}

// rpcLog drives RPCs on one client and keeps count, checking between them
// that the replica never saw the client NACK.
type rpcLog struct {
	t    *testing.T
	e    *env
	cc   *grpc.ClientConn
	id   string
	rpcs int
	// failures lists the RPCs that failed.
	failures []string
	// switchMisses lists the RPCs that failed with grpc-go's own
	// transient at a route switch (see isSwitchMiss).
	switchMisses []string
}

// isSwitchMiss reports whether err is grpc-go's client-side transient when
// a route moves to a cluster the channel dropped earlier: the channel swaps
// in the new config selector before xds_cluster_manager has published a
// picker with the re-created child, and an RPC picked in between fails with
// "unknown cluster selected for RPC" (grpc-go
// internal/xds/balancer/clustermanager/picker.go). The server cannot order
// the two; what it must do is send the route and the cluster together,
// which the no-NACK and traffic checks cover.
func isSwitchMiss(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unavailable && strings.HasPrefix(s.Message(), "unknown cluster selected for RPC: ")
}

// until makes RPCs until cond holds for the port that answered one (0 for
// a failure), failing the test at deadline; it returns when cond held.
// every, if not nil, is called with each answer.
func (l *rpcLog) until(what string, deadline time.Time, cond func(port int) bool, every func(port int)) time.Time {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		port, err := call(ctx, l.cc)
		at := time.Now()
		l.rpcs++
		switch {
		case err == nil:
		case isSwitchMiss(err):
			l.switchMisses = append(l.switchMisses, fmt.Sprintf("%s: %v", at.Format("15:04:05.000"), err))
		default:
			l.failures = append(l.failures, fmt.Sprintf("%s: %v", at.Format("15:04:05.000"), err))
		}
		l.checkNoNack()
		if every != nil {
			every(port)
		}
		if cond(port) {
			return at
		}
		if at.After(deadline) {
			l.t.Fatalf("%s: not by the deadline; last RPC answered by port %d (A %d, B %d); failures %q", what, port, l.e.a.port, l.e.b.port, l.failures)
		}
		time.Sleep(pollInterval)
	}
}

// checkNoNack fails the test if the client's stream shows a NACK of any
// type, or the replica counted one.
func (l *rpcLog) checkNoNack() {
	l.t.Helper()
	if st := l.e.stream(l.t, l.id); st != nil {
		for name, ts := range st.Types {
			if ts.NackVersion != "" || ts.LastNack != "" {
				l.t.Fatalf("%s NACKed by the client: %+v", name, *ts)
			}
		}
	}
	for _, typ := range ttlTypes {
		if got := l.e.metric(l.t, "legation_sotw_nacks_total", fmt.Sprintf("type=%q", typ)); got != 0 {
			l.t.Fatalf("legation_sotw_nacks_total{type=%s} = %v", typ, got)
		}
	}
}

// TestGRPCXDSTTLOverride: grpc-go's xDS client advertises
// xds.config.resource-in-sotw but not xds.config.supports-resource-ttl, so
// it must get TTL'd resources plain and never a heartbeat (promise 8). A
// route written with a TTL in its group's scope overrides the default one:
// traffic moves to backend B, stays there past the TTL when the lease is
// refreshed, and returns to backend A when the lease expires, with every
// RPC answered and no NACK.
func TestGRPCXDSTTLOverride(t *testing.T) {
	const (
		id  = "ttl-client"
		ttl = 4 * time.Second
	)
	e := newEnv(t)
	e.applyAndWait(t, strings.Join([]string{allYAML(e.a.port), clusterBYAML, endpointsBYAML(e.b.port)}, "---\n"))
	cc := e.newClient(t, id)
	waitReaches(t, cc, e.a.port)
	waitFor(t, "the client's four types ACKed", func() (bool, string) {
		st := e.stream(t, id)
		if st == nil || len(st.Types) != len(ttlTypes) {
			return false, fmt.Sprintf("stream %+v", st)
		}
		for name, ts := range st.Types {
			if ts.VersionSent == "" || ts.VersionAcked != ts.VersionSent {
				return false, fmt.Sprintf("%s: %+v", name, *ts)
			}
		}
		return st.Group == "c1", fmt.Sprintf("group %q, want c1", st.Group)
	})
	l := &rpcLog{t: t, e: e, cc: cc, id: id}

	// The override, for the client's group (its node cluster, c1).
	applying := time.Now()
	out, errOut, code := e.xdsadmin(routeToBYAML, "-o", "json", "apply", "-f", "-", "--scope", "c1", "--ttl", ttl.String())
	if code != 0 {
		t.Fatalf("xdsadmin apply --ttl: exit %d\n%s%s", code, out, errOut)
	}
	var res struct {
		Lease int64 `json:"lease"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Lease == 0 {
		t.Fatalf("xdsadmin apply --ttl -o json: no lease (%v) in:\n%s", err, out)
	}
	onB := l.until("traffic moves to backend B", applying.Add(testTimeout), func(p int) bool { return p == e.b.port }, nil)
	t.Logf("traffic on B %s after the apply", onB.Sub(applying).Round(time.Millisecond))

	// The client holds the route without a TTL: nothing to heartbeat.
	st := e.stream(t, id)
	if st == nil || len(st.TTLResources) != 0 {
		t.Errorf("/debug/streams: the client holds TTL'd resources: %+v", st)
	}
	if got := e.metric(t, "legation_sotw_ttl_resources", ""); got != 0 {
		t.Errorf("legation_sotw_ttl_resources = %v with a client that did not advertise TTLs, want 0", got)
	}

	// Traffic stays on B; the lease is refreshed 1.5s in.
	stayOnB := func(p int) {
		if p != 0 && p != e.b.port {
			t.Fatalf("RPC answered by port %d while the override lives, want backend B (%d)", p, e.b.port)
		}
	}
	l.until("1.5s into the lease", applying.Add(testTimeout), func(int) bool { return time.Since(applying) >= 1500*time.Millisecond }, stayOnB)
	s, err := store.New(store.Config{Client: e.etcd.Client(t), Writer: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	refreshing := time.Now()
	if _, err := s.RefreshLease(ctx, res.Lease); err != nil {
		t.Fatalf("refresh %s after the apply: %v", refreshing.Sub(applying), err)
	}

	// etcd restarted the lease after refreshing: B until then at least,
	// then A once the lease expired and the override went.
	backOnA := l.until("traffic returns to backend A", refreshing.Add(ttl+testTimeout), func(p int) bool { return p == e.a.port }, nil)
	t.Logf("traffic back on A %s after the refresh (ttl %s); %d RPCs", backOnA.Sub(refreshing).Round(time.Millisecond), ttl, l.rpcs)
	if backOnA.Before(refreshing.Add(ttl)) {
		t.Errorf("traffic returned to A %s after the refresh, before the refreshed lease could expire (%s)", backOnA.Sub(refreshing), ttl)
	}
	for range 20 {
		l.until("traffic stays on A", time.Now().Add(testTimeout), func(int) bool { return true }, func(p int) {
			if p != 0 && p != e.a.port {
				t.Fatalf("RPC answered by port %d after the override expired, want backend A (%d)", p, e.a.port)
			}
		})
	}

	if len(l.failures) != 0 {
		t.Errorf("%d of %d RPCs failed: %q", len(l.failures), l.rpcs, l.failures)
	}
	// Two route switches, each open to one grpc-go pick race lasting a
	// few RPCs at most (pollInterval apart).
	if len(l.switchMisses) > 4 {
		t.Errorf("%d of %d RPCs failed at a route switch, want at most 4: %q", len(l.switchMisses), l.rpcs, l.switchMisses)
	} else if len(l.switchMisses) != 0 {
		t.Logf("grpc-go's route-switch transient on %d RPCs: %q", len(l.switchMisses), l.switchMisses)
	}
	if got := e.metric(t, "legation_sotw_ttl_heartbeats_total", `type="route"`); got != 0 {
		t.Errorf("legation_sotw_ttl_heartbeats_total{type=route} = %v: a heartbeat to a client that did not advertise TTLs", got)
	}
	// The client ACKed the default route again.
	waitFor(t, "the route ACKed after the expiry", func() (bool, string) {
		st := e.stream(t, id)
		if st == nil || st.Types["route"] == nil {
			return false, fmt.Sprintf("stream %+v", st)
		}
		rs := st.Types["route"]
		return rs.VersionAcked == rs.VersionSent && rs.NackVersion == "", fmt.Sprintf("%+v", *rs)
	})
	l.checkNoNack()
}
