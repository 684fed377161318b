package status_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/xds/grpcapi"
)

// csdsEnv is a CSDS server on 127.0.0.1 over an etcd holding the records
// of two replicas, and a client of it.
type csdsEnv struct {
	client statusv3.ClientStatusDiscoveryServiceClient
	etcd   *clientv3.Client // the CSDS server's
	prefix string
}

func startCSDS(t *testing.T) *csdsEnv {
	t.Helper()
	return startCSDSWith(t, func(*status.CSDSConfig) {})
}

// startCSDSWith starts the server with the config edit makes, after
// tune, if any, tuned it.
func startCSDSWith(t *testing.T, edit func(*status.CSDSConfig), tune ...func(*status.CSDS)) *csdsEnv {
	t.Helper()
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	const prefix = "/legation/"

	wa := startWriter(t, c, prefix, "a", nil)
	nacked := node("envoy-nacked", "5")
	nacked.Types["listener"] = status.TypeStatus{VersionSent: "7", VersionAcked: "5", NackVersion: "7", LastNack: "listener l1: bad filter chain"}
	nacked.Types["route"] = status.TypeStatus{VersionSent: "7", VersionAcked: "5"}
	nacked.Types["endpoint"] = status.TypeStatus{} // requested, nothing sent yet
	wa.src.set(node("envoy-1", "5"), nacked)
	wa.sync()
	wb := startWriter(t, c, prefix, "b", nil)
	wb.src.set(node("envoy-2", "5"), node("grpc/client-1", "5"))
	wb.sync()
	if _, err := c.Put(testbase.Context(t), status.Key(prefix, "broken"), "{"); err != nil {
		t.Fatal(err)
	}

	cfg := status.CSDSConfig{Client: c, Prefix: prefix, Logger: testbase.Logger(t)}
	edit(&cfg)
	srv, err := status.NewCSDS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(srv)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	grpcapi.Register(g, grpcapi.Services{CSDS: srv})
	served := make(chan struct{})
	go func() {
		defer close(served)
		g.Serve(lis) //nolint:errcheck // ends with Stop
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		g.Stop()
		<-served
		stop()
		if err := <-ran; err != nil {
			t.Errorf("CSDS Run: %v", err)
		}
	})
	return &csdsEnv{client: statusv3.NewClientStatusDiscoveryServiceClient(cc), etcd: cfg.Client, prefix: prefix}
}

func ids(resp *statusv3.ClientStatusResponse) []string {
	var out []string
	for _, c := range resp.GetConfig() {
		out = append(out, c.GetNode().GetId())
	}
	return out
}

func idMatcher(sm *matcherv3.StringMatcher) *matcherv3.NodeMatcher {
	return &matcherv3.NodeMatcher{NodeId: sm}
}

func exact(s string) *matcherv3.NodeMatcher {
	return idMatcher(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}})
}

func TestCSDSFetch(t *testing.T) {
	env := startCSDS(t)
	prefix := func(s string) *matcherv3.NodeMatcher {
		return idMatcher(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: s}})
	}
	regex := func(s string) *matcherv3.NodeMatcher {
		return idMatcher(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: s}}})
	}
	for _, tc := range []struct {
		name     string
		matchers []*matcherv3.NodeMatcher
		want     []string
	}{
		{"all", nil, []string{"envoy-1", "envoy-2", "envoy-nacked", "grpc/client-1"}},
		{"exact", []*matcherv3.NodeMatcher{exact("envoy-2")}, []string{"envoy-2"}},
		{"exact unknown", []*matcherv3.NodeMatcher{exact("nobody")}, nil},
		{"exact, twice and malformed", []*matcherv3.NodeMatcher{exact("grpc/client-1"), exact("broken"), exact("grpc/client-1")}, []string{"grpc/client-1"}},
		{"prefix", []*matcherv3.NodeMatcher{prefix("envoy-")}, []string{"envoy-1", "envoy-2", "envoy-nacked"}},
		{"prefix ignoring case", []*matcherv3.NodeMatcher{idMatcher(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "GRPC/"}, IgnoreCase: true})}, []string{"grpc/client-1"}},
		{"suffix", []*matcherv3.NodeMatcher{idMatcher(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: "-1"}})}, []string{"envoy-1", "grpc/client-1"}},
		{"contains", []*matcherv3.NodeMatcher{idMatcher(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "nack"}})}, []string{"envoy-nacked"}},
		{"regex matches the whole id", []*matcherv3.NodeMatcher{regex(`envoy-\d`)}, []string{"envoy-1", "envoy-2"}},
		{"regex alternatives stay anchored", []*matcherv3.NodeMatcher{regex(`envoy-1|grpc/.*`)}, []string{"envoy-1", "grpc/client-1"}},
		{"any of several", []*matcherv3.NodeMatcher{exact("envoy-1"), prefix("grpc/")}, []string{"envoy-1", "grpc/client-1"}},
		{"no node_id: all", []*matcherv3.NodeMatcher{{}}, []string{"envoy-1", "envoy-2", "envoy-nacked", "grpc/client-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &statusv3.ClientStatusRequest{NodeMatchers: tc.matchers, Node: &corev3.Node{Id: "istioctl"}}
			resp, err := env.client.FetchClientStatus(testbase.Context(t), req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ids(resp)); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("bad regex", func(t *testing.T) {
		_, err := env.client.FetchClientStatus(testbase.Context(t), &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{regex("a(")}})
		if grpcstatus.Code(err) != codes.InvalidArgument {
			t.Fatalf("err = %v, want InvalidArgument", err)
		}
	})
}

func TestCSDSConfig(t *testing.T) {
	env := startCSDS(t)
	resp, err := env.client.FetchClientStatus(testbase.Context(t), &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{exact("envoy-nacked")}})
	if err != nil {
		t.Fatal(err)
	}
	want := &statusv3.ClientStatusResponse{Config: []*statusv3.ClientConfig{{
		Node: &corev3.Node{Id: "envoy-nacked", Cluster: "edge"},
		GenericXdsConfigs: []*statusv3.ClientConfig_GenericXdsConfig{
			{TypeUrl: resource.Cluster.URL, VersionInfo: "5", ConfigStatus: statusv3.ConfigStatus_SYNCED, ClientStatus: adminv3.ClientResourceStatus_ACKED},
			{TypeUrl: resource.Endpoint.URL, ConfigStatus: statusv3.ConfigStatus_NOT_SENT, ClientStatus: adminv3.ClientResourceStatus_REQUESTED},
			{
				TypeUrl: resource.Listener.URL, VersionInfo: "5", ConfigStatus: statusv3.ConfigStatus_ERROR, ClientStatus: adminv3.ClientResourceStatus_NACKED,
				ErrorState: &adminv3.UpdateFailureState{Details: "listener l1: bad filter chain", VersionInfo: "7"},
			},
			{TypeUrl: resource.Route.URL, VersionInfo: "5", ConfigStatus: statusv3.ConfigStatus_STALE, ClientStatus: adminv3.ClientResourceStatus_ACKED},
		},
	}}}
	if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestCSDSStream(t *testing.T) {
	env := startCSDS(t)
	stream, err := env.client.StreamClientStatus(testbase.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  *statusv3.ClientStatusRequest
		want []string
	}{
		{&statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{exact("envoy-1")}}, []string{"envoy-1"}},
		{&statusv3.ClientStatusRequest{}, []string{"envoy-1", "envoy-2", "envoy-nacked", "grpc/client-1"}},
		{&statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{idMatcher(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `.*/.*`}}})}}, []string{"grpc/client-1"}},
	} {
		if err := stream.Send(tc.req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, ids(resp)); diff != "" {
			t.Errorf("nodes for %v (-want +got):\n%s", tc.req, diff)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want the stream to end", err)
	}

	// A bad request ends the stream with InvalidArgument.
	bad, err := env.client.StreamClientStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Send(&statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{idMatcher(&matcherv3.StringMatcher{})}}); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Recv(); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v, want InvalidArgument", err)
	}
}
