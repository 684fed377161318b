package delta_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
)

// fuzzCatchup is the fuzz server's CatchupTimeout: an input presenting a
// version from the future in initial_resource_versions costs this much,
// not a second.
const fuzzCatchup = 50 * time.Millisecond

// FuzzDeltaRequests sends a short sequence of arbitrary
// DeltaDiscoveryRequests (each input is up to three encoded requests;
// what does not decode is dropped) on a new delta ADS stream of a shared
// real server over a small real view: two clusters with their endpoints,
// a listener, its route and two on-demand virtual hosts. The requests may
// carry any types, subscribe and unsubscribe any names (VHDS aliases
// too), any initial_resource_versions, nonces and error details. Then a
// probe, a subscription to a name of a type the sequence did not use,
// which the server must answer unless it has ended the stream: so each
// input runs at the server's pace and a hang fails it after
// xdstest.Timeout. A panic in a server goroutine ends this process,
// which the fuzzer reports. Every response must be well formed: of a type
// asked for, a nonce, a decimal system version, resources named with
// decimal versions. An ended stream must carry a real gRPC status (not
// Unknown, which is a non-status error, nor Internal). Then a fresh
// stream must still be served.
func FuzzDeltaRequests(f *testing.F) {
	e := newEnvWith(f, xdstest.Options{}, func(c *delta.Config) { c.CatchupTimeout = fuzzCatchup })
	rev := e.Apply(f, []store.Put{
		xdstest.Put(f, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(f, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
		xdstest.Put(f, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 8080, 8081)),
		xdstest.Put(f, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 9090)),
		xdstest.Put(f, resource.Listener, store.DefaultScope, xdstest.APIListener(f, "l1", "r1", true)),
		xdstest.Put(f, resource.Route, store.DefaultScope, xdstest.Route("r1", "l1", "a")),
		xdstest.Put(f, resource.VirtualHost, store.DefaultScope, vhost("r1/exact", "a.example.com")),
		xdstest.Put(f, resource.VirtualHost, store.DefaultScope, vhost("r1/wild", "*.example.com", "*")),
	})
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cc.Close() })
	client := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)

	v := strconv.FormatInt(rev, 10)
	n1 := &corev3.Node{Id: "fuzz", Cluster: "c1"}
	cds, eds, vhds := resource.Cluster.URL, resource.Endpoint.URL, resource.VirtualHost.URL
	for _, seq := range [][]*discoveryv3.DeltaDiscoveryRequest{
		// CDS wildcard, then its ACK.
		{{Node: n1, TypeUrl: cds}, {TypeUrl: cds, ResponseNonce: "1"}},
		// EDS by name, more names, then unsubscribe one and a phantom.
		{
			{Node: n1, TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}},
			{TypeUrl: eds, ResponseNonce: "1", ResourceNamesSubscribe: []string{"b", "missing", "*"}},
			{TypeUrl: eds, ResponseNonce: "2", ResourceNamesUnsubscribe: []string{"a", "never"}},
		},
		// VHDS aliases: exact, wildcard, none, malformed.
		{{Node: n1, TypeUrl: vhds, ResourceNamesSubscribe: []string{"r1/a.example.com", "r1/b.example.com", "r2/x", "noslash", "/", "r1/"}}},
		// A reconnect presenting versions: current, stale, future, junk.
		{{Node: n1, TypeUrl: cds, InitialResourceVersions: map[string]string{"a": v, "b": "1", "c": "1000000", "d": "x"}}},
		{{Node: n1, TypeUrl: vhds, ResourceNamesSubscribe: []string{"r1/a.example.com"}, InitialResourceVersions: map[string]string{"r1/a.example.com": v}}},
		// A type_url nobody serves; none at all.
		{{Node: n1, TypeUrl: "type.googleapis.com/nope"}},
		{{Node: n1}},
		// A NACK, then a stale nonce.
		{
			{Node: n1, TypeUrl: cds},
			{TypeUrl: cds, ResponseNonce: "1", ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: "rejected"}},
			{TypeUrl: cds, ResponseNonce: "99"},
		},
		// A nonce and an error detail for a type never asked.
		{{Node: n1, TypeUrl: resource.Secret.URL, ResponseNonce: "5", ErrorDetail: &status.Status{Code: 13}}},
	} {
		xdstest.AddSeqSeeds(f, seq)
	}

	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		seq := xdstest.DecodeSeq(func() *discoveryv3.DeltaDiscoveryRequest { return new(discoveryv3.DeltaDiscoveryRequest) }, a, b, c)
		if len(seq) == 0 {
			return // nothing decodes as a request: nothing to send
		}
		fuzzDeltaSequence(t, client, seq)
		fuzzDeltaFresh(t, client, rev)
	})
}

// fuzzDeltaSequence sends seq and a probe on a new stream and checks what
// comes back until the probe's answer or the end of the stream.
func fuzzDeltaSequence(t *testing.T, client discoveryv3.AggregatedDiscoveryServiceClient, seq []*discoveryv3.DeltaDiscoveryRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	st, err := client.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	probe, asked := xdstest.ProbeType(seq)
	if probe == nil {
		// Three requests cannot name every type (there are more than
		// three).
		t.Fatal("no type left for the probe")
	}
	const probeName = "fuzz-probe" // exists in no type: answered as removed
	for _, m := range append(seq, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: probe.URL, ResourceNamesSubscribe: []string{probeName}}) {
		if err := st.Send(m); err != nil {
			break // the server ended the stream: Recv says how
		}
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("after %s, neither an answer to the probe (%s) nor the end of the stream", xdstest.Timeout, probe.Name)
			}
			s, ok := grpcstatus.FromError(err)
			t.Logf("the stream ended: %v", err)
			if !ok || errors.Is(err, io.EOF) || s.Code() == codes.OK || s.Code() == codes.Unknown || s.Code() == codes.Internal {
				t.Fatalf("stream ended with %v (code %v), want a gRPC status error", err, s.Code())
			}
			return
		}
		if err := fuzzCheckDelta(resp, asked); err != nil {
			t.Fatal(err)
		}
		if resp.GetTypeUrl() == probe.URL {
			return
		}
	}
}

// fuzzCheckDelta checks that resp is well formed and of a type asked.
func fuzzCheckDelta(resp *discoveryv3.DeltaDiscoveryResponse, asked map[string]bool) error {
	typ, ok := resource.ByURL(resp.GetTypeUrl())
	if !ok || !asked[typ.URL] {
		return fmt.Errorf("a response of type %q, which was not asked for", resp.GetTypeUrl())
	}
	if resp.GetNonce() == "" {
		return fmt.Errorf("a %s response without a nonce", typ.Name)
	}
	if _, err := strconv.ParseInt(resp.GetSystemVersionInfo(), 10, 64); err != nil {
		return fmt.Errorf("a %s response at system version %q", typ.Name, resp.GetSystemVersionInfo())
	}
	for _, r := range resp.GetResources() {
		if r.GetName() == "" {
			return fmt.Errorf("a %s response holding a resource without a name", typ.Name)
		}
		if _, err := strconv.ParseInt(r.GetVersion(), 10, 64); err != nil {
			return fmt.Errorf("a %s response holding %q at version %q", typ.Name, r.GetName(), r.GetVersion())
		}
		if u := r.GetResource().GetTypeUrl(); r.GetResource() != nil && u != typ.URL {
			return fmt.Errorf("a %s response holding a %q", typ.Name, u)
		}
	}
	return nil
}

// fuzzDeltaFresh checks that a new stream is still served: a CDS wildcard
// subscription gets both clusters at rev or later.
func fuzzDeltaFresh(t *testing.T, client discoveryv3.AggregatedDiscoveryServiceClient, rev int64) {
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	st, err := client.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("open a fresh stream: %v", err)
	}
	if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "fresh"}, TypeUrl: resource.Cluster.URL}); err != nil {
		t.Fatalf("fresh stream: send: %v", err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("fresh stream: %v", err)
	}
	if n, err := strconv.ParseInt(resp.GetSystemVersionInfo(), 10, 64); err != nil || n < rev || len(resp.GetResources()) != 2 {
		t.Fatalf("fresh stream: %d clusters at version %q, want 2 at %d or later", len(resp.GetResources()), resp.GetSystemVersionInfo(), rev)
	}
}
