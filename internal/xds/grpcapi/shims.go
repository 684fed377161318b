package grpcapi

import (
	"context"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"

	"github.com/legation-io/legation/internal/state/resource"
)

// The per-type shims the generated gRPC interfaces force: one method per
// (service, protocol), each naming its resource type.

type (
	req  = discoveryv3.DiscoveryRequest
	resp = discoveryv3.DiscoveryResponse
)

type adsService struct{ xds }

func (s adsService) StreamAggregatedResources(st SotWStream) error { return s.stream(st, nil) }
func (s adsService) DeltaAggregatedResources(st DeltaStream) error { return s.deltaStream(st, nil) }

type cdsService struct{ xds }

func (s cdsService) StreamClusters(st SotWStream) error { return s.stream(st, resource.Cluster) }
func (s cdsService) DeltaClusters(st DeltaStream) error { return s.deltaStream(st, resource.Cluster) }
func (s cdsService) FetchClusters(ctx context.Context, r *req) (*resp, error) {
	return s.fetch(ctx, r, resource.Cluster)
}

type edsService struct{ xds }

func (s edsService) StreamEndpoints(st SotWStream) error { return s.stream(st, resource.Endpoint) }
func (s edsService) DeltaEndpoints(st DeltaStream) error { return s.deltaStream(st, resource.Endpoint) }
func (s edsService) FetchEndpoints(ctx context.Context, r *req) (*resp, error) {
	return s.fetch(ctx, r, resource.Endpoint)
}

type ldsService struct{ xds }

func (s ldsService) StreamListeners(st SotWStream) error { return s.stream(st, resource.Listener) }
func (s ldsService) DeltaListeners(st DeltaStream) error { return s.deltaStream(st, resource.Listener) }
func (s ldsService) FetchListeners(ctx context.Context, r *req) (*resp, error) {
	return s.fetch(ctx, r, resource.Listener)
}

type rdsService struct{ xds }

func (s rdsService) StreamRoutes(st SotWStream) error { return s.stream(st, resource.Route) }
func (s rdsService) DeltaRoutes(st DeltaStream) error { return s.deltaStream(st, resource.Route) }
func (s rdsService) FetchRoutes(ctx context.Context, r *req) (*resp, error) {
	return s.fetch(ctx, r, resource.Route)
}

type srdsService struct{ xds }

func (s srdsService) StreamScopedRoutes(st SotWStream) error {
	return s.stream(st, resource.ScopedRoute)
}
func (s srdsService) DeltaScopedRoutes(st DeltaStream) error {
	return s.deltaStream(st, resource.ScopedRoute)
}
func (s srdsService) FetchScopedRoutes(ctx context.Context, r *req) (*resp, error) {
	return s.fetch(ctx, r, resource.ScopedRoute)
}

type sdsService struct{ xds }

func (s sdsService) StreamSecrets(st SotWStream) error { return s.stream(st, resource.Secret) }
func (s sdsService) DeltaSecrets(st DeltaStream) error { return s.deltaStream(st, resource.Secret) }
func (s sdsService) FetchSecrets(ctx context.Context, r *req) (*resp, error) {
	return s.fetch(ctx, r, resource.Secret)
}

type rtdsService struct{ xds }

func (s rtdsService) StreamRuntime(st SotWStream) error { return s.stream(st, resource.Runtime) }
func (s rtdsService) DeltaRuntime(st DeltaStream) error { return s.deltaStream(st, resource.Runtime) }
func (s rtdsService) FetchRuntime(ctx context.Context, r *req) (*resp, error) {
	return s.fetch(ctx, r, resource.Runtime)
}

type ecdsService struct{ xds }

func (s ecdsService) StreamExtensionConfigs(st SotWStream) error {
	return s.stream(st, resource.ExtensionConfig)
}
func (s ecdsService) DeltaExtensionConfigs(st DeltaStream) error {
	return s.deltaStream(st, resource.ExtensionConfig)
}
func (s ecdsService) FetchExtensionConfigs(ctx context.Context, r *req) (*resp, error) {
	return s.fetch(ctx, r, resource.ExtensionConfig)
}

// vhdsService serves VHDS, which is delta only.
type vhdsService struct{ xds }

func (s vhdsService) DeltaVirtualHosts(st DeltaStream) error {
	return s.deltaStream(st, resource.VirtualHost)
}

// ledsService serves LEDS, which is delta only: LbEndpoints, by name or
// by glob collection.
type ledsService struct{ xds }

func (s ledsService) DeltaLocalityEndpoints(st DeltaStream) error {
	return s.deltaStream(st, resource.LbEndpoint)
}

// The services implement every method of their generated interface, so a
// method added upstream fails the build here rather than answering
// Unimplemented unnoticed.
var (
	_ discoveryv3.AggregatedDiscoveryServiceServer      = adsService{}
	_ clusterv3.ClusterDiscoveryServiceServer           = cdsService{}
	_ endpointv3.EndpointDiscoveryServiceServer         = edsService{}
	_ listenerv3.ListenerDiscoveryServiceServer         = ldsService{}
	_ routev3.RouteDiscoveryServiceServer               = rdsService{}
	_ routev3.ScopedRoutesDiscoveryServiceServer        = srdsService{}
	_ secretv3.SecretDiscoveryServiceServer             = sdsService{}
	_ runtimev3.RuntimeDiscoveryServiceServer           = rtdsService{}
	_ extensionv3.ExtensionConfigDiscoveryServiceServer = ecdsService{}
	_ routev3.VirtualHostDiscoveryServiceServer         = vhdsService{}
	_ endpointv3.LocalityEndpointDiscoveryServiceServer = ledsService{}
)
