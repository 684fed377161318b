package loadgen

import (
	"strconv"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/testkit/fixture"
)

// The benchmark fixture: as make bench-load's, 200 EDS clusters of 20
// endpoints each, and as many listeners.
const (
	benchClusters  = 200
	benchEndpoints = 20
)

// benchFleet is a fleet of the fixture's names with one client, as Run
// makes it.
func benchFleet(tb testing.TB) *client {
	tb.Helper()
	f := &fleet{index: map[string]int{}, routeIndex: map[string]int{}, errors: map[string]int{}}
	for i := range benchClusters {
		f.names = append(f.names, fixture.ClusterName(i))
		f.index[f.names[i]] = i
		f.routes = append(f.routes, fixture.RouteName(i))
		f.routeIndex[f.routes[i]] = i
	}
	c := newClient(f, 0, nil)
	f.clients = []*client{c}
	return c
}

// fixtureBodies returns the fixture's resources of typ: clusters, load
// assignments or listeners.
func fixtureBodies(tb testing.TB, typ string) []proto.Message {
	tb.Helper()
	out := make([]proto.Message, 0, benchClusters)
	for i := range benchClusters {
		switch typ {
		case cdsURL:
			out = append(out, fixture.ClusterResource(fixture.ClusterName(i)))
		case edsURL:
			out = append(out, fixture.Endpoints(i, benchEndpoints, 8080).LoadAssignment())
		case ldsURL:
			l, err := fixture.ListenerResource(i)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, l)
		}
	}
	return out
}

// sotwWire is the encoding of a SotW response carrying every resource of
// the fixture of typ at version.
func sotwWire(tb testing.TB, typ string, version int) []byte {
	tb.Helper()
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: typ, VersionInfo: strconv.Itoa(version), Nonce: "n" + strconv.Itoa(version)}
	for _, m := range fixtureBodies(tb, typ) {
		a, err := anypb.New(m)
		if err != nil {
			tb.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// deltaWire is the same as a delta response.
func deltaWire(tb testing.TB, typ string, version int) []byte {
	tb.Helper()
	resp := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typ, SystemVersionInfo: strconv.Itoa(version), Nonce: "n" + strconv.Itoa(version)}
	for i, m := range fixtureBodies(tb, typ) {
		a, err := anypb.New(m)
		if err != nil {
			tb.Fatal(err)
		}
		name := fixture.ClusterName(i)
		if typ == ldsURL {
			name = fixture.ListenerName(i)
		}
		resp.Resources = append(resp.Resources, &discoveryv3.Resource{Name: name, Version: strconv.Itoa(version), Resource: a})
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var benchTypes = []struct{ name, url string }{{"CDS", cdsURL}, {"EDS", edsURL}, {"LDS", ldsURL}}

// BenchmarkClientSotWResponse is a client's work per SotW response of the
// fixture, from the bytes gRPC received to the ACK built: decoding,
// counting, the names read, what the client holds.
func BenchmarkClientSotWResponse(b *testing.B) {
	for _, tc := range benchTypes {
		b.Run(tc.name, func(b *testing.B) {
			c := benchFleet(b)
			wire := sotwWire(b, tc.url, 1)
			s, resp := &sotwState{}, &sotwResponse{}
			send := func(*discoveryv3.DiscoveryRequest) error { return nil }
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for b.Loop() {
				if err := benchSotW(c, s, resp, wire, send); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClientDeltaResponse is the same for delta responses.
func BenchmarkClientDeltaResponse(b *testing.B) {
	for _, tc := range benchTypes {
		b.Run(tc.name, func(b *testing.B) {
			c := benchFleet(b)
			wire := deltaWire(b, tc.url, 1)
			s, resp := &deltaState{}, &deltaResponse{}
			send := func(*discoveryv3.DeltaDiscoveryRequest) error { return nil }
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for b.Loop() {
				if err := benchDelta(c, s, resp, wire, send); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchSotW decodes wire as the client's codec does and handles it.
func benchSotW(c *client, s *sotwState, resp *sotwResponse, wire []byte, send func(*discoveryv3.DiscoveryRequest) error) error {
	if err := (leanCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, resp); err != nil {
		return err
	}
	defer resp.release()
	return c.onSotW(s, resp, send)
}

// benchDelta: see benchSotW.
func benchDelta(c *client, s *deltaState, resp *deltaResponse, wire []byte, send func(*discoveryv3.DeltaDiscoveryRequest) error) error {
	if err := (leanCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, resp); err != nil {
		return err
	}
	defer resp.release()
	return c.onDelta(s, resp, send)
}
