package delta_test

import (
	"context"
	"testing"
	"time"

	clusterv3svc "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointv3svc "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// env is the test kit's env (a real embedded etcd, store and view) with
// the delta server behind the ADS and per-type services on a real gRPC
// server on 127.0.0.1.
type env struct {
	*xdstest.Env
	srv  *delta.Server
	reg  *prometheus.Registry // the server's metrics
	addr string
}

// newEnv starts an env, stopped when tb ends.
func newEnv(tb testing.TB) *env {
	tb.Helper()
	return newEnvWith(tb, xdstest.Options{})
}

// newEnvWith is newEnv on an env with kit's options, the server's config
// changed by opts. It is the one place that builds the server of this
// package's tests.
func newEnvWith(tb testing.TB, kit xdstest.Options, opts ...func(*delta.Config)) *env {
	tb.Helper()
	e := &env{Env: xdstest.NewEnv(tb, kit), reg: prometheus.NewRegistry()}
	cfg := delta.Config{Config: xdsstream.Config{Source: e.View, Registerer: e.reg, CatchupTimeout: time.Second}}
	for _, o := range opts {
		o(&cfg)
	}
	var err error
	if e.srv, err = delta.New(cfg); err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(grpcapi.ServerOptions()...)
	grpcapi.Register(g, grpcapi.Services{Delta: e.srv})
	e.addr = xdstest.Serve(tb, g)
	return e
}

// dial returns a client connection to e's gRPC server, closed when tb
// ends.
func (e *env) dial(tb testing.TB) *grpc.ClientConn { return xdstest.Dial(tb, e.addr) }

// deltaADS opens a delta ADS stream on a new connection.
func (e *env) deltaADS(tb testing.TB) *xdstest.DeltaStream { return xdstest.OpenDelta(tb, e.dial(tb)) }

type deltaClient = grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]

// deltaCDS opens a raw stream of the per-type DeltaClusters service.
func (e *env) deltaCDS(tb testing.TB) *xdstest.DeltaStream {
	tb.Helper()
	return &xdstest.DeltaStream{Stream: xdstest.Open(tb, e.dial(tb), func(ctx context.Context, cc *grpc.ClientConn) (deltaClient, error) {
		return clusterv3svc.NewClusterDiscoveryServiceClient(cc).DeltaClusters(ctx)
	})}
}

// deltaEDS opens a raw stream of the per-type DeltaEndpoints service.
func (e *env) deltaEDS(tb testing.TB) *xdstest.DeltaStream {
	tb.Helper()
	return &xdstest.DeltaStream{Stream: xdstest.Open(tb, e.dial(tb), func(ctx context.Context, cc *grpc.ClientConn) (deltaClient, error) {
		return endpointv3svc.NewEndpointDiscoveryServiceClient(cc).DeltaEndpoints(ctx)
	})}
}
