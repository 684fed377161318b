package loadgen

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/tools/chaos/record"
)

// The references: what the client read with the full proto runtime
// before it read from the wire.

func refClusterEDSName(b []byte) (string, error) {
	var cl clusterv3.Cluster
	if err := proto.Unmarshal(b, &cl); err != nil {
		return "", err
	}
	name := cl.GetEdsClusterConfig().GetServiceName()
	if name == "" {
		name = cl.GetName()
	}
	return name, nil
}

func refListenerRoutes(b []byte) ([]string, error) {
	var l listenerv3.Listener
	if err := proto.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	var out []string
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			a := f.GetTypedConfig()
			if a.GetTypeUrl() != hcmURL {
				continue
			}
			var hcm hcmv3.HttpConnectionManager
			if err := proto.Unmarshal(a.GetValue(), &hcm); err != nil {
				return nil, err
			}
			out = append(out, hcm.GetRds().GetRouteConfigName())
		}
	}
	return out, nil
}

func leanListenerRoutes(b []byte) ([]string, error) {
	var out []string
	err := listenerRoutes(b, func(r []byte) { out = append(out, string(r)) })
	return out, err
}

// refSotWRecord and refDeltaRecord are the resources a recorded response
// carried, as record.go read them from the proto runtime's messages.
func refSotWRecord(resp *discoveryv3.DiscoveryResponse) []record.Resource {
	var rs []record.Resource
	for _, a := range resp.GetResources() {
		rs = append(rs, record.Resource{Name: claName(a.GetValue()), Version: resp.GetVersionInfo(), Hash: record.BodyHash(a.GetValue())})
	}
	return rs
}

func refDeltaRecord(resp *discoveryv3.DeltaDiscoveryResponse) []record.Resource {
	var rs []record.Resource
	for _, r := range resp.GetResources() {
		rs = append(rs, record.Resource{Name: r.GetName(), Version: r.GetVersion(), Hash: record.BodyHash(r.GetResource().GetValue())})
	}
	return rs
}

func leanSotWRecord(r *sotwResponse) []record.Resource {
	var rs []record.Resource
	for _, b := range r.bodies {
		rs = append(rs, record.Resource{Name: claName(b), Version: r.versionInfo, Hash: record.BodyHash(b)})
	}
	return rs
}

func leanDeltaRecord(r *deltaResponse) []record.Resource {
	var rs []record.Resource
	for _, x := range r.resources {
		rs = append(rs, record.Resource{Name: string(x.name), Version: string(x.version), Hash: record.BodyHash(x.body)})
	}
	return rs
}

// checkLean compares every lean reader with its reference on b: where the
// reference reads b the lean reader must read the same, and where the
// lean reader fails the reference must fail too.
func checkLean(t *testing.T, b []byte) {
	t.Helper()
	agree := func(what string, lean, ref any, leanErr, refErr error) {
		t.Helper()
		if leanErr != nil && refErr == nil {
			t.Errorf("%s: lean reader fails (%v) where proto.Unmarshal reads %v", what, leanErr, ref)
		}
		if refErr == nil && leanErr == nil && fmt.Sprint(lean) != fmt.Sprint(ref) {
			t.Errorf("%s: lean reader reads %q, proto.Unmarshal %q", what, lean, ref)
		}
	}

	name, err := clusterEDSName(b)
	refName, refErr := refClusterEDSName(b)
	agree("cluster", string(name), refName, err, refErr)

	routes, err := leanListenerRoutes(b)
	refRoutes, refErr := refListenerRoutes(b)
	agree("listener", routes, refRoutes, err, refErr)

	var cla endpointv3.ClusterLoadAssignment
	if proto.Unmarshal(b, &cla) == nil && claName(b) != cla.GetClusterName() {
		t.Errorf("cluster load assignment: lean reader reads %q, proto.Unmarshal %q", claName(b), cla.GetClusterName())
	}

	var sotw sotwResponse
	err = (leanCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &sotw)
	var refSotW discoveryv3.DiscoveryResponse
	refErr = proto.Unmarshal(b, &refSotW)
	agree("DiscoveryResponse", []any{sotw.versionInfo, sotw.typeURL, sotw.nonce, leanSotWRecord(&sotw)},
		[]any{refSotW.GetVersionInfo(), refSotW.GetTypeUrl(), refSotW.GetNonce(), refSotWRecord(&refSotW)}, err, refErr)
	if err == nil && refErr == nil {
		for i, a := range refSotW.GetResources() {
			if !bytes.Equal(sotw.bodies[i], a.GetValue()) {
				t.Errorf("DiscoveryResponse: resource %d: lean reader reads %x, proto.Unmarshal %x", i, sotw.bodies[i], a.GetValue())
			}
		}
	}
	sotw.release()

	var delta deltaResponse
	err = (leanCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &delta)
	var refDelta discoveryv3.DeltaDiscoveryResponse
	refErr = proto.Unmarshal(b, &refDelta)
	agree("DeltaDiscoveryResponse", []any{delta.systemVersionInfo, delta.typeURL, delta.nonce, leanDeltaRecord(&delta), delta.removed},
		[]any{refDelta.GetSystemVersionInfo(), refDelta.GetTypeUrl(), refDelta.GetNonce(), refDeltaRecord(&refDelta), refDelta.GetRemovedResources()}, err, refErr)
	if err == nil && refErr == nil {
		for i, r := range refDelta.GetResources() {
			if !bytes.Equal(delta.resources[i].body, r.GetResource().GetValue()) {
				t.Errorf("DeltaDiscoveryResponse: resource %d: lean reader reads %x, proto.Unmarshal %x", i, delta.resources[i].body, r.GetResource().GetValue())
			}
		}
	}
	delta.release()
}

// leanSeeds are real encodings of what the lean readers read, and a few
// made to exercise merging and oneofs.
func leanSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	enc := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	cluster := enc(fixture.ClusterResource(fixture.ClusterName(1)))
	plain := enc(&clusterv3.Cluster{Name: "plain", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}})
	svc := enc(&clusterv3.Cluster{EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: "other"}})
	l, err := fixture.ListenerResource(2)
	if err != nil {
		tb.Fatal(err)
	}
	listener := enc(l)
	// A listener whose filter holds an HCM, then config discovery, then
	// an HCM again; and one whose HCM has inline routes after rds.
	hcmAny := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig()
	inline, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "first"}}})
	if err != nil {
		tb.Fatal(err)
	}
	inline.Value = append(inline.Value, enc(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{}})...)
	twoFilters := enc(&listenerv3.Listener{Name: "two", FilterChains: []*listenerv3.FilterChain{
		{Filters: []*listenerv3.Filter{{Name: "a", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny}}}},
		{Filters: []*listenerv3.Filter{{Name: "b", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: inline}}}},
	}})
	cla := enc(fixture.Endpoints(3, 4, 8080).LoadAssignment())
	sotw := enc(&discoveryv3.DiscoveryResponse{VersionInfo: "7", TypeUrl: edsURL, Nonce: "n7",
		Resources: []*anypb.Any{{TypeUrl: edsURL, Value: cla}, {TypeUrl: edsURL, Value: enc(fixture.Endpoints(4, 2, 8080).LoadAssignment())}}})
	delta := enc(&discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "8", TypeUrl: cdsURL, Nonce: "n8",
		Resources:        []*discoveryv3.Resource{{Name: fixture.ClusterName(1), Version: "8", Resource: &anypb.Any{TypeUrl: cdsURL, Value: cluster}, Aliases: []string{"x"}}},
		RemovedResources: []string{fixture.ClusterName(2)}})
	// A delta response whose one resource carries its resource twice:
	// the two merge, the second value wins.
	twice := slices.Concat(
		enc(&discoveryv3.Resource{Name: "twice", Resource: &anypb.Any{TypeUrl: cdsURL, Value: cluster}}),
		enc(&discoveryv3.Resource{Version: "2", Resource: &anypb.Any{Value: plain}}))
	merged := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), twice)
	return [][]byte{
		merged,
		cluster, plain, svc, slices.Concat(cluster, svc), slices.Concat(svc, plain),
		listener, twoFilters, slices.Concat(listener, twoFilters),
		cla, slices.Concat(cla, enc(fixture.Endpoints(5, 1, 80).LoadAssignment())),
		sotw, slices.Concat(sotw, sotw), delta, slices.Concat(delta, delta),
		{}, {0x0a, 0x02, 0xff, 0xfe}, {0x1a, 0x80},
	}
}

// FuzzLeanNames checks the lean readers against proto.Unmarshal on
// arbitrary input (checkLean).
func FuzzLeanNames(f *testing.F) {
	for _, b := range leanSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(checkLean)
}

// TestLeanReadsFixture checks the lean readers on the bench fixture's
// responses: what they read, the names the client finds, and that the
// wire size counted is proto.Size of the message, which the client
// counted before.
func TestLeanReadsFixture(t *testing.T) {
	for _, tc := range benchTypes {
		sotw, delta := sotwWire(t, tc.url, 3), deltaWire(t, tc.url, 3)
		checkLean(t, sotw)
		checkLean(t, delta)
		var ref discoveryv3.DiscoveryResponse
		if err := proto.Unmarshal(sotw, &ref); err != nil {
			t.Fatal(err)
		}
		var refDelta discoveryv3.DeltaDiscoveryResponse
		if err := proto.Unmarshal(delta, &refDelta); err != nil {
			t.Fatal(err)
		}
		if len(sotw) != proto.Size(&ref) || len(delta) != proto.Size(&refDelta) {
			t.Errorf("%s: %d and %d bytes on the wire, proto.Size %d and %d", tc.name, len(sotw), len(delta), proto.Size(&ref), proto.Size(&refDelta))
		}
		for _, a := range ref.GetResources() {
			checkLean(t, a.GetValue())
		}

		c := benchFleet(t)
		var resp sotwResponse
		if err := (leanCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(sotw)}, &resp); err != nil {
			t.Fatal(err)
		}
		var idx []int
		var err error
		switch tc.url {
		case cdsURL:
			idx, err = c.serviceNames(resp.bodies)
		case ldsURL:
			idx, err = c.routeNames(resp.bodies)
		case edsURL:
			for _, b := range resp.bodies {
				idx = append(idx, c.f.index[string(leanName(b))])
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if want := marked(slices.Repeat([]bool{true}, benchClusters)); !slices.Equal(idx, want) {
			t.Errorf("%s: indexes %v, want 0 to %d", tc.name, idx, benchClusters-1)
		}
		resp.release()
	}
}

// TestClientCountsAndHolds runs SotW and delta responses through a client:
// what it counts and holds, and the ACKs it sends.
func TestClientCountsAndHolds(t *testing.T) {
	c := benchFleet(t)
	var sent []*discoveryv3.DiscoveryRequest
	send := func(r *discoveryv3.DiscoveryRequest) error { sent = append(sent, r); return nil }
	s, resp := &sotwState{askLDS: true}, &sotwResponse{}
	cds, eds := sotwWire(t, cdsURL, 4), sotwWire(t, edsURL, 5)
	for _, w := range [][]byte{cds, cds, eds} {
		if err := benchSotW(c, s, resp, w, send); err != nil {
			t.Fatal(err)
		}
	}
	var types []string
	for _, r := range sent {
		types = append(types, r.GetTypeUrl()+"@"+r.GetVersionInfo()+fmt.Sprintf("/%d", len(r.GetResourceNames())))
	}
	// The first CDS: EDS asked for, CDS ACKed, LDS asked for; the second
	// changes nothing: an ACK; EDS: an ACK naming the clusters.
	want := []string{edsURL + "@/200", cdsURL + "@4/0", ldsURL + "@/0", cdsURL + "@4/0", edsURL + "@5/200"}
	if !slices.Equal(types, want) {
		t.Errorf("requests %v, want %v", types, want)
	}
	if got, want := c.bytes.Load(), int64(2*len(cds)+len(eds)); got != want {
		t.Errorf("bytes %d, want %d", got, want)
	}
	if got := c.resources.Load(); got != 3*benchClusters {
		t.Errorf("resources %d, want %d", got, 3*benchClusters)
	}
	if c.heldN.Load() != benchClusters || c.edsVersion.Load() != 5 {
		t.Errorf("holding %d at version %d, want %d at 5", c.heldN.Load(), c.edsVersion.Load(), benchClusters)
	}

	d := benchFleet(t)
	d.deltaVersions = map[string]map[string]string{}
	var dsent []*discoveryv3.DeltaDiscoveryRequest
	dsend := func(r *discoveryv3.DeltaDiscoveryRequest) error { dsent = append(dsent, r); return nil }
	ds, dresp := &deltaState{}, &deltaResponse{}
	for _, w := range [][]byte{deltaWire(t, cdsURL, 6), deltaWire(t, edsURL, 9)} {
		if err := benchDelta(d, ds, dresp, w, dsend); err != nil {
			t.Fatal(err)
		}
	}
	if len(dsent) != 3 || len(dsent[0].GetResourceNamesSubscribe()) != benchClusters {
		t.Errorf("delta requests %v, want an EDS subscription to %d clusters and two ACKs", dsent, benchClusters)
	}
	if d.heldN.Load() != benchClusters || d.edsVersion.Load() != 9 {
		t.Errorf("delta: holding %d at version %d, want %d at 9", d.heldN.Load(), d.edsVersion.Load(), benchClusters)
	}
	if got := d.deltaVersions[edsURL][fixture.ClusterName(7)]; got != "9" {
		t.Errorf("delta: holds %s at %q, want 9", fixture.ClusterName(7), got)
	}
}
