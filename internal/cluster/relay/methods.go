package relay

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// kind is the protocol of an xDS streaming method, by its request type.
type kind int

const (
	sotw  kind = iota // DiscoveryRequest
	delta             // DeltaDiscoveryRequest
	load              // LoadStatsRequest (LRS)
)

// xdsServices are the services whose bidirectional streams are relayed:
// ADS and the per-type services, SotW and delta, and LRS (a node's load
// reports go to its home, which rolls them up). Not CSDS or health, and
// not the unary Fetch methods.
var xdsServices = []*grpc.ServiceDesc{
	&discoveryv3.AggregatedDiscoveryService_ServiceDesc,
	&clusterv3.ClusterDiscoveryService_ServiceDesc,
	&endpointv3.EndpointDiscoveryService_ServiceDesc,
	&endpointv3.LocalityEndpointDiscoveryService_ServiceDesc,
	&listenerv3.ListenerDiscoveryService_ServiceDesc,
	&routev3.RouteDiscoveryService_ServiceDesc,
	&routev3.ScopedRoutesDiscoveryService_ServiceDesc,
	&routev3.VirtualHostDiscoveryService_ServiceDesc,
	&secretv3.SecretDiscoveryService_ServiceDesc,
	&runtimev3.RuntimeDiscoveryService_ServiceDesc,
	&extensionv3.ExtensionConfigDiscoveryService_ServiceDesc,
	&loadv3.LoadReportingService_ServiceDesc,
}

// xdsMethods maps the full name of every relayed method
// ("/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources")
// to its kind, read from the services' descriptors: the request type
// decides, not the method's name.
func xdsMethods() (map[string]kind, error) {
	sotwReq := (&discoveryv3.DiscoveryRequest{}).ProtoReflect().Descriptor().FullName()
	deltaReq := (&discoveryv3.DeltaDiscoveryRequest{}).ProtoReflect().Descriptor().FullName()
	loadReq := (&loadv3.LoadStatsRequest{}).ProtoReflect().Descriptor().FullName()
	out := map[string]kind{}
	for _, sd := range xdsServices {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		if err != nil {
			return nil, fmt.Errorf("relay: service %s: %w", sd.ServiceName, err)
		}
		svc, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("relay: %s is not a service", sd.ServiceName)
		}
		for _, st := range sd.Streams {
			if !st.ClientStreams || !st.ServerStreams {
				continue
			}
			md := svc.Methods().ByName(protoreflect.Name(st.StreamName))
			if md == nil {
				return nil, fmt.Errorf("relay: %s has no method %s", sd.ServiceName, st.StreamName)
			}
			full := "/" + sd.ServiceName + "/" + st.StreamName
			switch md.Input().FullName() {
			case sotwReq:
				out[full] = sotw
			case deltaReq:
				out[full] = delta
			case loadReq:
				out[full] = load
			}
		}
	}
	return out, nil
}

// nodeOf decodes a stream's first request, of kind k, and returns its
// node id ("" when it names no node).
func nodeOf(b []byte, k kind) (string, error) {
	if k == load {
		var r loadv3.LoadStatsRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			return "", err
		}
		return r.GetNode().GetId(), nil
	}
	if k == delta {
		var r discoveryv3.DeltaDiscoveryRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			return "", err
		}
		return r.GetNode().GetId(), nil
	}
	var r discoveryv3.DiscoveryRequest
	if err := proto.Unmarshal(b, &r); err != nil {
		return "", err
	}
	return r.GetNode().GetId(), nil
}
