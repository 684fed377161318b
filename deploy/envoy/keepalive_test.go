package envoy

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/docgen"
)

// keepalive is the keepalive every bootstrap carries and
// docs/reference/bootstraps.md recommends: the one place it is stated. To
// change it, change it here and in the files, then run `make docs`.
var keepalive = struct {
	// H2Interval and H2Timeout: HTTP/2 pings on the xDS cluster of an
	// Envoy taking xDS over gRPC (connection_keepalive). Envoy jitters the
	// interval down by up to 15%, which must stay above the replicas'
	// --keepalive-min-time. Long, because a ping costs the replica's
	// process CPU (docs/operations/performance.md, keepalive): pings only
	// find what TCP keepalive cannot, a replica whose process hangs or a
	// dead one while a request is unacknowledged.
	H2Interval, H2Timeout time.Duration
	// TCPTime, TCPInterval and TCPProbes: TCP keepalive of every cluster
	// to the replicas (upstream_connection_options.tcp_keepalive): the
	// kernel's probes find a dead replica host or a cut path, at no cost
	// to the replica's process.
	TCPTime, TCPInterval time.Duration
	TCPProbes            uint32
	// GRPCTime and GRPCTimeout: what grpc-go's xDS client uses; gRPC's
	// bootstrap format has no keepalive setting.
	GRPCTime, GRPCTimeout time.Duration
}{
	H2Interval: 5 * time.Minute, H2Timeout: 20 * time.Second,
	TCPTime: 15 * time.Second, TCPInterval: 5 * time.Second, TCPProbes: 3,
	GRPCTime: 5 * time.Minute, GRPCTimeout: 20 * time.Second,
}

// envoyJitter is how far Envoy jitters connection_keepalive's interval
// down when interval_jitter is unset (15%).
const envoyJitter = 0.15

// checkKeepalive checks the keepalive of cluster c, whose HTTP options are
// opts: TCP keepalive as recommended, and HTTP/2 pings as recommended
// for gRPC.
func checkKeepalive(t *testing.T, c *clusterv3.Cluster, opts *httpv3.HttpProtocolOptions, rest bool) {
	t.Helper()
	name := c.GetName()
	tcp := c.GetUpstreamConnectionOptions().GetTcpKeepalive()
	got := [3]uint32{tcp.GetKeepaliveTime().GetValue(), tcp.GetKeepaliveInterval().GetValue(), tcp.GetKeepaliveProbes().GetValue()}
	want := [3]uint32{uint32(keepalive.TCPTime.Seconds()), uint32(keepalive.TCPInterval.Seconds()), keepalive.TCPProbes}
	if got != want {
		t.Errorf("cluster %s: tcp_keepalive time, interval, probes %v: want %v (docs/reference/bootstraps.md)", name, got, want)
	}
	if rest {
		return
	}
	ka := opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetConnectionKeepalive()
	if ka.GetInterval().AsDuration() != keepalive.H2Interval || ka.GetTimeout().AsDuration() != keepalive.H2Timeout {
		t.Errorf("cluster %s: connection_keepalive %v: want interval %v, timeout %v (docs/reference/bootstraps.md)",
			name, ka, keepalive.H2Interval, keepalive.H2Timeout)
	}
	if ka.GetIntervalJitter() != nil {
		t.Errorf("cluster %s: connection_keepalive interval_jitter set: the recommended interval assumes Envoy's 15%%", name)
	}
}

// TestKeepaliveAboveMinTime: what the recommended keepalive pings at
// most is no faster than replicas accept (--keepalive-min-time); a client
// pinging faster gets GOAWAY too_many_pings.
func TestKeepaliveAboveMinTime(t *testing.T) {
	minTime := replica.DefaultConfig().KeepaliveMinTime
	if shortest := time.Duration(float64(keepalive.H2Interval) * (1 - envoyJitter)); shortest < minTime {
		t.Errorf("Envoy pings as often as every %v; replicas refuse pings faster than %v", shortest, minTime)
	}
	if keepalive.GRPCTime < minTime {
		t.Errorf("gRPC pings every %v; replicas refuse pings faster than %v", keepalive.GRPCTime, minTime)
	}
}

// notesKeepalive finds connection_keepalive in the Helm chart's NOTES,
// which print an Envoy cluster after `helm install`.
var notesKeepalive = regexp.MustCompile(`connection_keepalive: \{interval: (\S+), timeout: (\S+)\}`)

// TestHelmNotesKeepalive: the Envoy cluster the Helm chart's NOTES print
// carries the recommended keepalive too.
func TestHelmNotesKeepalive(t *testing.T) {
	notes, err := os.ReadFile(filepath.Join("..", "helm", "legation", "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	m := notesKeepalive.FindAllSubmatch(notes, -1)
	if len(m) == 0 {
		t.Fatal("NOTES.txt: no connection_keepalive: {interval: ..., timeout: ...}")
	}
	for _, sm := range m {
		if string(sm[1]) != seconds(keepalive.H2Interval) || string(sm[2]) != seconds(keepalive.H2Timeout) {
			t.Errorf("NOTES.txt: %s: want interval %s, timeout %s (docs/reference/bootstraps.md)",
				sm[0], seconds(keepalive.H2Interval), seconds(keepalive.H2Timeout))
		}
	}
	tcp := fmt.Sprintf("tcp_keepalive: {keepalive_time: %d, keepalive_interval: %d, keepalive_probes: %d}",
		int(keepalive.TCPTime.Seconds()), int(keepalive.TCPInterval.Seconds()), keepalive.TCPProbes)
	if !strings.Contains(string(notes), tcp) {
		t.Errorf("NOTES.txt: no %s (docs/reference/bootstraps.md)", tcp)
	}
}

// seconds writes d as a bootstrap's Duration: 300s.
func seconds(d time.Duration) string { return fmt.Sprintf("%ds", int(d.Seconds())) }

// duration writes d for prose: 15s, 5m, 1m30s.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// keepaliveTable renders the recommended keepalive as the table of
// docs/reference/bootstraps.md.
func keepaliveTable() string {
	k := keepalive
	// files lists the bootstraps of an extension taking xDS by one of
	// apis (any, if none).
	files := func(ext string, apis ...corev3.ApiConfigSource_ApiType) string {
		var out []string
		for _, n := range slices.Sorted(maps.Keys(bootstraps)) {
			if filepath.Ext(n) == ext && (len(apis) == 0 || slices.Contains(apis, bootstraps[n].api)) {
				out = append(out, "`"+n+"`")
			}
		}
		return strings.Join(out, ", ")
	}
	grpc, rest := []corev3.ApiConfigSource_ApiType{corev3.ApiConfigSource_GRPC, corev3.ApiConfigSource_DELTA_GRPC}, corev3.ApiConfigSource_REST
	rows := []string{
		"| bootstraps | setting | value |",
		"| --- | --- | --- |",
		fmt.Sprintf("| %s | `tcp_keepalive` in the xDS cluster's `upstream_connection_options` | `{keepalive_time: %d, keepalive_interval: %d, keepalive_probes: %d}`: the kernel's TCP probes after %s idle, %s apart, the connection closed after %d unanswered: a dead replica host or a cut path is found within %s, at no cost to the replica's process |",
			files(".yaml", append(grpc, rest)...), int(k.TCPTime.Seconds()), int(k.TCPInterval.Seconds()), k.TCPProbes, duration(k.TCPTime), duration(k.TCPInterval), k.TCPProbes,
			duration(k.TCPTime+time.Duration(k.TCPProbes)*k.TCPInterval)),
		fmt.Sprintf("| %s | `connection_keepalive` in the xDS cluster's `http2_protocol_options` | `{interval: %s, timeout: %s}`: an HTTP/2 ping every %s (Envoy jitters it down by up to %d%%), the connection closed when no answer comes within %s: a replica whose process hangs, or a dead one while a request is unacknowledged (when TCP does not probe), is found within %s |",
			files(".yaml", grpc...), seconds(k.H2Interval), seconds(k.H2Timeout), duration(k.H2Interval), int(envoyJitter*100), duration(k.H2Timeout),
			duration(k.H2Interval+k.H2Timeout)),
		fmt.Sprintf("| %s | none: gRPC's bootstrap format has no keepalive setting | grpc-go's xDS client pings after %s without activity and closes the connection when no answer comes within %s |",
			files(".json"), duration(k.GRPCTime), duration(k.GRPCTimeout)),
		fmt.Sprintf("| %s | none | no connection to a replica |", files(".yaml", -1)),
	}
	return strings.Join(rows, "\n")
}

// TestDocsBootstrapKeepalive: the keepalive table of
// docs/reference/bootstraps.md states the recommended keepalive; `make
// docs` rewrites it.
func TestDocsBootstrapKeepalive(t *testing.T) {
	docgen.Region(t, "docs/reference/bootstraps.md", "keepalive", keepaliveTable())
}
