package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/wire"
)

// ignoreNonce compares responses but for their nonces, which are per
// stream.
var ignoreNonce = cmp.Options{
	protocmp.Transform(),
	protocmp.IgnoreFields(&discoveryv3.DiscoveryResponse{}, "nonce"),
	protocmp.IgnoreFields(&discoveryv3.DeltaDiscoveryResponse{}, "nonce"),
}

// A node homed on B whose streams land on A is served by B through A, SotW
// and delta: same responses as from B directly, pushes included; B
// serves the relayed streams even though its own ring says A (a relayed
// stream is never relayed again).
func TestRelayToHome(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b")
	rev := c.apply(t, clusters(3)...)
	a.setHomes(map[string]string{"nb": "b"})
	// B's ring disagrees: were B to relay, the stream would loop.
	b.setHomes(map[string]string{"nb": "a"})

	sotw := adsStream(t, a.addr)
	sotw.Send(cdsRequest("nb"))
	got := sotw.Expect()
	if got.GetVersionInfo() != xdstest.Version(rev) || len(got.GetResources()) != 3 {
		t.Fatalf("relayed SotW response: version %s with %d resources, want %d with 3", got.GetVersionInfo(), len(got.GetResources()), rev)
	}
	dlt := deltaADSStream(t, a.addr)
	dlt.Send(deltaCDSRequest("nb"))
	gotDelta := dlt.Expect()

	// The same, from B directly, now that B's ring agrees.
	b.setHomes(map[string]string{})
	direct := adsStream(t, b.addr)
	direct.Send(cdsRequest("nb"))
	if diff := cmp.Diff(direct.Expect(), got, ignoreNonce); diff != "" {
		t.Errorf("relayed SotW response differs from a direct one (-direct +relayed):\n%s", diff)
	}
	directDelta := deltaADSStream(t, b.addr)
	directDelta.Send(deltaCDSRequest("nb"))
	if diff := cmp.Diff(directDelta.Expect(), gotDelta, ignoreNonce); diff != "" {
		t.Errorf("relayed delta response differs from a direct one (-direct +relayed):\n%s", diff)
	}

	// Served by B: B's servers hold the streams, A's do not.
	if n := len(a.sotw.Streams()) + len(a.delta.Streams()); n != 0 {
		t.Errorf("A serves %d streams, want 0", n)
	}
	if got := sotwNodes(b); !slices.Equal(got, []string{"nb", "nb"}) {
		t.Errorf("B's SotW streams are of nodes %v, want nb twice (relayed and direct)", got)
	}
	if n := len(b.delta.Streams()); n != 2 {
		t.Errorf("B serves %d delta streams, want 2", n)
	}
	for _, s := range streamsOf(a, "nb") {
		if s.ServedBy != "b" || s.RelayedBy != "" {
			t.Errorf("A's stream %+v: want served by b, relayed by none", s)
		}
	}
	relayed := 0
	for _, s := range streamsOf(b, "nb") {
		if s.ServedBy != relay.Local {
			t.Errorf("B's stream %+v: want served locally", s)
		}
		if s.RelayedBy == "a" {
			relayed++
		}
	}
	if relayed != 2 {
		t.Errorf("B has %d streams relayed by a, want 2: %+v", relayed, b.relay.Streams())
	}
	if g := metric(t, a.reg, "legation_relay_streams_relayed"); g != 2 {
		t.Errorf("A's legation_relay_streams_relayed = %v, want 2", g)
	}
	if g := metric(t, b.reg, "legation_relay_streams_relayed"); g != 0 {
		t.Errorf("B's legation_relay_streams_relayed = %v, want 0", g)
	}

	// Both directions keep flowing: ACKs go to B, B's pushes come back.
	sotw.Send(&discoveryv3.DiscoveryRequest{TypeUrl: got.GetTypeUrl(), VersionInfo: got.GetVersionInfo(), ResponseNonce: got.GetNonce()})
	dlt.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: gotDelta.GetTypeUrl(), ResponseNonce: gotDelta.GetNonce()})
	sotw.ExpectNone()
	rev = c.apply(t, xdstest.Cluster("c001", 2000))
	push := sotw.Expect()
	if push.GetVersionInfo() != xdstest.Version(rev) || len(push.GetResources()) != 3 {
		t.Errorf("relayed SotW push: version %s with %d resources, want %d with 3", push.GetVersionInfo(), len(push.GetResources()), rev)
	}
	dpush := dlt.Expect()
	if len(dpush.GetResources()) != 1 || dpush.GetResources()[0].GetName() != "c001" || dpush.GetResources()[0].GetVersion() != xdstest.Version(rev) {
		t.Errorf("relayed delta push: %v, want c001 at version %d", dpush.GetResources(), rev)
	}
}

// A stream of a node homed where it lands, or naming no node, is served
// there, its first request replayed to the server.
func TestServeLocally(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	c.addReplica(t, "b")
	rev := c.apply(t, clusters(2)...)
	a.setHomes(map[string]string{"nb": "b"})

	for _, id := range []string{"na", ""} {
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		got := s.Expect()
		if got.GetVersionInfo() != xdstest.Version(rev) || len(got.GetResources()) != 2 {
			t.Errorf("node %q: response version %s with %d resources, want %d with 2", id, got.GetVersionInfo(), len(got.GetResources()), rev)
		}
		d := deltaADSStream(t, a.addr)
		d.Send(deltaCDSRequest(id))
		if got := d.Expect(); len(got.GetResources()) != 2 {
			t.Errorf("node %q: delta response with %d resources, want 2", id, len(got.GetResources()))
		}
		infos := streamsOf(a, id)
		if len(infos) != 2 {
			t.Fatalf("node %q: A registered %v, want 2 streams", id, infos)
		}
		for _, s := range infos {
			if s.ServedBy != relay.Local || s.RelayedBy != "" {
				t.Errorf("node %q: stream %+v, want served locally", id, s)
			}
		}
	}
	if g := metric(t, a.reg, "legation_relay_streams_relayed"); g != 0 {
		t.Errorf("legation_relay_streams_relayed = %v, want 0", g)
	}
	if f := metric(t, a.reg, "legation_relay_fallbacks_total"); f != 0 {
		t.Errorf("legation_relay_fallbacks_total = %v, want 0", f)
	}
}

// A per-type SotW stream (CDS's StreamClusters) and a per-type delta
// stream are relayed as ADS is.
func TestRelayPerType(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b")
	rev := c.apply(t, clusters(2)...)
	a.setHomes(map[string]string{"nb": "b"})

	s := xdstest.Open(t, xdstest.Dial(t, a.addr), func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
		return clusterv3.NewClusterDiscoveryServiceClient(cc).StreamClusters(ctx)
	})
	s.Send(cdsRequest("nb"))
	if got := s.Expect(); got.GetVersionInfo() != xdstest.Version(rev) || len(got.GetResources()) != 2 {
		t.Errorf("response version %s with %d resources, want %d with 2", got.GetVersionInfo(), len(got.GetResources()), rev)
	}
	d := xdstest.Open(t, xdstest.Dial(t, a.addr), func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse], error) {
		return clusterv3.NewClusterDiscoveryServiceClient(cc).DeltaClusters(ctx)
	})
	d.Send(deltaCDSRequest("nb"))
	if got := d.Expect(); len(got.GetResources()) != 2 {
		t.Errorf("delta response with %d resources, want 2", len(got.GetResources()))
	}
	if got := sotwNodes(b); !slices.Equal(got, []string{"nb"}) {
		t.Errorf("B's SotW streams are of nodes %v, want [nb]", got)
	}
	if n := len(b.delta.Streams()); n != 1 {
		t.Errorf("B serves %d delta streams, want 1", n)
	}
	want := []string{
		"/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters",
		"/envoy.service.cluster.v3.ClusterDiscoveryService/DeltaClusters",
	}
	var got []string
	for _, s := range streamsOf(b, "nb") {
		got = append(got, s.Method)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("B's streams of nb have methods %v, want %v", got, want)
	}
}

// An LRS stream is relayed to its node's home like the node's xDS
// streams: the home answers it and counts its reports.
func TestRelayLRS(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b")
	a.setHomes(map[string]string{"nb": "b"})

	s := xdstest.Open(t, xdstest.Dial(t, a.addr), func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[loadv3.LoadStatsRequest, loadv3.LoadStatsResponse], error) {
		return loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	})
	s.Send(&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: "nb"}})
	if got := s.Expect(); !got.GetSendAllClusters() || got.GetLoadReportingInterval().AsDuration() != 10*time.Second {
		t.Errorf("first LoadStatsResponse %v, want send_all_clusters and a 10s interval", got)
	}
	s.Send(&loadv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName:        "c1",
		LoadReportInterval: durationpb.New(time.Second),
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
			Locality: &corev3.Locality{Zone: "z1"}, TotalIssuedRequests: 7, TotalSuccessfulRequests: 7,
		}},
	}}})
	xdstest.WaitFor(t, "B counts the report", func() (bool, string) {
		got := metric(t, b.reg, "legation_lrs_reports_total")
		return got == 1, fmt.Sprintf("legation_lrs_reports_total = %v on B", got)
	})
	if got := metric(t, a.reg, "legation_lrs_reports_total"); got != 0 {
		t.Errorf("legation_lrs_reports_total = %v on A, want 0 (relayed)", got)
	}
	var got []string
	for _, s := range streamsOf(b, "nb") {
		got = append(got, s.Method)
	}
	if want := []string{"/envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats"}; !slices.Equal(got, want) {
		t.Errorf("B's streams of nb have methods %v, want %v", got, want)
	}
}

// A home that cannot be reached: its nodes' streams are served locally,
// and counted. Unreachable is both a closed port and a port that accepts
// connections but never speaks HTTP/2 (bounded by ConnectTimeout).
func TestUnreachableHomeFallsBack(t *testing.T) {
	c := newCluster(t)
	// A listener nobody serves: the kernel completes the handshake, and
	// nothing answers.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	a := c.addReplica(t, "a", func(cfg *relay.Config) {
		cfg.ConnectTimeout = 500 * time.Millisecond
		home := cfg.Home
		cfg.Home = func(id string) (string, string, bool) {
			if id == "n-mute" {
				return "mute", mute.Addr().String(), false
			}
			return home(id)
		}
	})
	rev := c.apply(t, clusters(2)...)
	a.setHomes(map[string]string{"n-gone": "gone"})

	for i, id := range []string{"n-gone", "n-mute"} {
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		if got := s.Expect(); got.GetVersionInfo() != xdstest.Version(rev) || len(got.GetResources()) != 2 {
			t.Errorf("%s: response version %s with %d resources, want %d with 2", id, got.GetVersionInfo(), len(got.GetResources()), rev)
		}
		if f := metric(t, a.reg, "legation_relay_fallbacks_total"); f != float64(i+1) {
			t.Errorf("%s: legation_relay_fallbacks_total = %v, want %d", id, f, i+1)
		}
		infos := streamsOf(a, id)
		if len(infos) != 1 || infos[0].ServedBy != relay.Local {
			t.Errorf("%s: A's streams %+v, want one served locally", id, infos)
		}
	}
	if got := sotwNodes(a); len(got) != 2 {
		t.Errorf("A's SotW streams are of nodes %v, want n-gone and n-mute", got)
	}
}

// The client cancels a relayed stream: both legs end, on both replicas.
func TestClientCancelEndsBothLegs(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b")
	c.apply(t, clusters(1)...)
	a.setHomes(map[string]string{"nb": "b"})

	s := adsStream(t, a.addr)
	s.Send(cdsRequest("nb"))
	s.Expect()
	d := deltaADSStream(t, a.addr)
	d.Send(deltaCDSRequest("nb"))
	d.Expect()
	s.Cancel()
	d.Cancel()
	waitFor(t, "both legs to end", func() bool {
		return len(a.relay.Streams())+len(b.relay.Streams())+len(b.sotw.Streams())+len(b.delta.Streams()) == 0 &&
			metric(t, a.reg, "legation_relay_streams_relayed") == 0
	})
}

// The home ends the stream (its server stops): the client gets an error
// status, not a hang, and A forgets the stream.
func TestHomeEndsStream(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b")
	c.apply(t, clusters(1)...)
	a.setHomes(map[string]string{"nb": "b"})

	s := adsStream(t, a.addr)
	s.Send(cdsRequest("nb"))
	s.Expect()
	d := deltaADSStream(t, a.addr)
	d.Send(deltaCDSRequest("nb"))
	d.Expect()
	b.grpc.Stop()
	for name, err := range map[string]error{"SotW": s.ExpectErr(), "delta": d.ExpectErr()} {
		if code := status.Code(err); code != codes.Unavailable {
			t.Errorf("%s: stream ended with %v, want UNAVAILABLE", name, err)
		}
	}
	waitFor(t, "A to forget the streams", func() bool { return len(a.relay.Streams()) == 0 })
}

// A first request that does not decode ends the stream with
// INVALID_ARGUMENT, relayed or not, SotW or delta.
func TestBadFirstRequest(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	cc := xdstest.Dial(t, a.addr)
	methods := []string{
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
		"/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters",
	}
	inputs := map[string][]byte{
		"truncated tag":    {0xff},
		"truncated length": {0x12, 0x05, 0x01},
		"field zero":       {0x00, 0x01},
		"bad utf-8 string": {0x22, 0x02, 0xff, 0xfe}, // SotW type_url / delta initial versions key
		"node not a node":  {0x12, 0x02, 0xff, 0xff, 0x0a, 0x02, 0xff, 0xff},
	}
	for _, m := range methods {
		for name, in := range inputs {
			t.Run(m[strings.LastIndex(m, "/")+1:]+"/"+name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
				defer cancel()
				cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, m, grpc.ForceCodecV2(wire.Codec{}))
				if err != nil {
					t.Fatal(err)
				}
				if err := cs.SendMsg(&wire.Frame{Bytes: in}); err != nil && !errors.Is(err, context.Canceled) {
					t.Logf("send: %v", err)
				}
				err = cs.RecvMsg(new(wire.Frame))
				if code := status.Code(err); code != codes.InvalidArgument {
					t.Errorf("stream ended with %v, want INVALID_ARGUMENT", err)
				}
			})
		}
	}
	if n := len(a.relay.Streams()); n != 0 {
		t.Errorf("%d streams registered, want 0", n)
	}
}

// Methods other than the xDS streams pass through untouched.
func TestOtherMethodsPassThrough(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	w, err := healthpb.NewHealthClient(xdstest.Dial(t, a.addr)).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Recv()
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Watch: %v, %v; want SERVING", resp, err)
	}
	if n := len(a.relay.Streams()); n != 0 {
		t.Errorf("%d streams registered, want 0", n)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  relay.Config
		ok   bool
	}{
		{"defaults", relay.Config{Self: "a"}, true},
		{"default config", func() relay.Config { c := relay.DefaultConfig(); c.Self = "a"; return c }(), true},
		{"no self", relay.Config{}, false},
		{"negative timeout", relay.Config{Self: "a", ConnectTimeout: -time.Second}, false},
		{"negative idle", relay.Config{Self: "a", ConnIdleTimeout: -time.Second}, false},
		{"rate without burst", relay.Config{Self: "a", Rate: 5}, false},
		{"burst without rate", relay.Config{Self: "a", Burst: 5}, false},
		{"negative rate", relay.Config{Self: "a", Rate: -1, Burst: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tc.ok)
			}
			r, err := relay.New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Errorf("New() error %v, want ok %v", err, tc.ok)
			}
			if r != nil {
				if err := r.Close(); err != nil {
					t.Error(err)
				}
				if err := r.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
			}
		})
	}
}

// Relayed streams to one home share one connection, kept ConnIdleTimeout
// after the last one ends, then closed; the next stream dials again.
func TestConnPool(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a", func(cfg *relay.Config) { cfg.ConnIdleTimeout = 100 * time.Millisecond })
	c.addReplica(t, "b")
	c.apply(t, clusters(1)...)
	a.setHomes(map[string]string{"n1": "b", "n2": "b"})

	for round := range 2 {
		var open []*xdstest.SotWStream
		for _, id := range []string{"n1", "n2"} {
			s := adsStream(t, a.addr)
			s.Send(cdsRequest(id))
			s.Expect()
			open = append(open, s)
		}
		if n := relay.PooledConns(a.relay); n != 1 {
			t.Errorf("round %d: %d pooled connections for two streams to one home, want 1", round, n)
		}
		for _, s := range open {
			s.Cancel()
		}
		waitFor(t, "the idle connection to close", func() bool { return relay.PooledConns(a.relay) == 0 })
	}
	if n := metric(t, a.reg, "legation_relay_fallbacks_total"); n != 0 {
		t.Errorf("legation_relay_fallbacks_total = %v, want 0", n)
	}
}

// TestUnreachableHomeNext: a stream whose home cannot be reached goes to
// the next replica Next names (where it will be once the home is declared
// dead), and is served here only if that one is unreachable too or is
// this replica.
func TestUnreachableHomeNext(t *testing.T) {
	c := newCluster(t)
	var asked [][]string
	var mu sync.Mutex
	b := c.addReplica(t, "b")
	a := c.addReplica(t, "a", func(cfg *relay.Config) {
		cfg.Next = func(id string, unreachable []string) (string, string, bool) {
			mu.Lock()
			asked = append(asked, slices.Clone(unreachable))
			mu.Unlock()
			switch id {
			case "n-to-b":
				return "b", b.addr, false
			case "n-to-self":
				return "a", "", true
			}
			return "gone2", gone, false
		}
	})
	rev := c.apply(t, clusters(2)...)
	a.setHomes(map[string]string{"n-to-b": "gone", "n-to-self": "gone", "n-twice": "gone"})

	s := adsStream(t, a.addr)
	s.Send(cdsRequest("n-to-b"))
	if got := s.Expect(); got.GetVersionInfo() != xdstest.Version(rev) || len(got.GetResources()) != 2 {
		t.Errorf("n-to-b: response version %s with %d resources, want %d with 2", got.GetVersionInfo(), len(got.GetResources()), rev)
	}
	if infos := streamsOf(a, "n-to-b"); len(infos) != 1 || infos[0].ServedBy != "b" {
		t.Errorf("n-to-b: A's streams %+v, want one relayed to b", infos)
	}
	waitFor(t, "b to serve n-to-b", func() bool { return len(streamsOf(b, "n-to-b")) == 1 })

	for _, id := range []string{"n-to-self", "n-twice"} {
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		s.Expect()
		if infos := streamsOf(a, id); len(infos) != 1 || infos[0].ServedBy != relay.Local {
			t.Errorf("%s: A's streams %+v, want one served locally", id, infos)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := [][]string{{"gone"}, {"gone"}, {"gone"}}
	if !slices.EqualFunc(asked, want, slices.Equal) {
		t.Errorf("Next asked with %v, want %v (one Next per stream: at most two tries)", asked, want)
	}
	if f := metric(t, a.reg, "legation_relay_fallbacks_total"); f != 4 {
		t.Errorf("legation_relay_fallbacks_total = %v, want 4 (three homes and one next unreachable)", f)
	}
}
