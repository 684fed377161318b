package grpcapi

import (
	"context"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/xds/wire"
)

// SotWStream is a state-of-the-world xDS stream as gRPC hands it over.
type SotWStream = grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]

// DeltaStream is a delta xDS stream as gRPC hands it over.
type DeltaStream = grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]

// SotW serves state-of-the-world xDS (package sotw's *Server is one). Its
// methods are called concurrently, once per stream or request.
type SotW interface {
	// Serve serves one stream until it ends; t is the type of a per-type
	// service, nil on ADS. It blocks.
	Serve(st SotWStream, t *resource.Type) error
	// Fetch answers one unary Fetch of type t. notModified is true when
	// the request's version_info is current.
	Fetch(ctx context.Context, r *discoveryv3.DiscoveryRequest, t *resource.Type) (resp *discoveryv3.DiscoveryResponse, notModified bool, err error)
}

// Delta serves delta xDS (package delta's *Server is one). Serve is called
// concurrently, once per stream; it blocks until the stream ends. t is the
// type of a per-type service, nil on ADS.
type Delta interface {
	Serve(st DeltaStream, t *resource.Type) error
}

// Services are what Register registers. A nil field leaves its services
// out: their methods answer Unimplemented.
type Services struct {
	// SotW serves SotW ADS, the per-type SotW services and their Fetch
	// methods.
	SotW SotW
	// Delta serves delta ADS, the per-type delta services and VHDS.
	Delta Delta
	// CSDS serves envoy.service.status.v3.ClientStatusDiscoveryService.
	CSDS statusv3.ClientStatusDiscoveryServiceServer
	// LRS serves envoy.service.load_stats.v3.LoadReportingService
	// (package lrs's *Server is one).
	LRS loadv3.LoadReportingServiceServer
	// Health serves grpc.health.v1.Health.
	Health healthpb.HealthServer
}

// ServerOptions are the options a gRPC server serving these services
// needs: the codec that sends shared, pre-encoded responses (and relays
// frames undecoded).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(wire.Codec{})}
}

// Register registers s on g. Each xDS service (ADS, CDS, EDS, LDS, RDS,
// SRDS, SDS, RTDS, ECDS, VHDS, LEDS) is registered once, with its SotW methods
// served by s.SotW and its delta methods by s.Delta.
func Register(g grpc.ServiceRegistrar, s Services) {
	x := xds{sotw: s.SotW, delta: s.Delta}
	if s.SotW != nil || s.Delta != nil {
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, adsService{x})
		clusterv3.RegisterClusterDiscoveryServiceServer(g, cdsService{x})
		endpointv3.RegisterEndpointDiscoveryServiceServer(g, edsService{x})
		listenerv3.RegisterListenerDiscoveryServiceServer(g, ldsService{x})
		routev3.RegisterRouteDiscoveryServiceServer(g, rdsService{x})
		routev3.RegisterScopedRoutesDiscoveryServiceServer(g, srdsService{x})
		secretv3.RegisterSecretDiscoveryServiceServer(g, sdsService{x})
		runtimev3.RegisterRuntimeDiscoveryServiceServer(g, rtdsService{x})
		extensionv3.RegisterExtensionConfigDiscoveryServiceServer(g, ecdsService{x})
		routev3.RegisterVirtualHostDiscoveryServiceServer(g, vhdsService{x})
		endpointv3.RegisterLocalityEndpointDiscoveryServiceServer(g, ledsService{x})
	}
	if s.CSDS != nil {
		statusv3.RegisterClientStatusDiscoveryServiceServer(g, s.CSDS)
	}
	if s.LRS != nil {
		loadv3.RegisterLoadReportingServiceServer(g, s.LRS)
	}
	if s.Health != nil {
		healthpb.RegisterHealthServer(g, s.Health)
	}
}

// xds routes each method to the server of its protocol.
type xds struct {
	sotw  SotW
	delta Delta
}

func (x xds) stream(st SotWStream, t *resource.Type) error {
	if x.sotw == nil {
		return status.Error(codes.Unimplemented, "state-of-the-world xDS is not served here")
	}
	return x.sotw.Serve(st, t)
}

func (x xds) deltaStream(st DeltaStream, t *resource.Type) error {
	if x.delta == nil {
		return status.Error(codes.Unimplemented, "delta xDS is not served here")
	}
	return x.delta.Serve(st, t)
}

// fetch answers a unary Fetch like a REST-JSON poll; a current version is
// UNAVAILABLE "not modified", as the xDS REST protocol's gRPC mapping has
// no 304.
func (x xds) fetch(ctx context.Context, r *discoveryv3.DiscoveryRequest, t *resource.Type) (*discoveryv3.DiscoveryResponse, error) {
	if x.sotw == nil {
		return nil, status.Error(codes.Unimplemented, "state-of-the-world xDS is not served here")
	}
	resp, notModified, err := x.sotw.Fetch(ctx, r, t)
	if err != nil {
		return nil, err
	}
	if notModified {
		return nil, status.Error(codes.Unavailable, "not modified: version_info is current")
	}
	return resp, nil
}
