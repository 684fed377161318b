package resource

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Ref is a reference from one resource to another by name.
type Ref struct {
	// Path is the field of the referring resource that holds the name,
	// in the form ValidateDeep uses.
	Path string
	// Type and Name are the resource referred to.
	Type *Type
	Name string
}

const hcmURL = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

// Refs returns the references the resource m makes that Envoy
// resolves over xDS: a listener's HttpConnectionManagers to their route
// configurations (RDS), a route configuration's or virtual host's routes
// to their clusters (cluster, weighted_clusters, request_mirror_policies),
// and an EDS cluster to its endpoints. Names given otherwise (a cluster
// header, a scoped route's fragments) are not followed.
func Refs(m proto.Message) []Ref {
	var refs []Ref
	switch msg := m.(type) {
	case *listenerv3.Listener:
		chains := msg.GetFilterChains()
		for i, fc := range chains {
			refs = append(refs, chainRefs(fmt.Sprintf("filter_chains[%d]", i), fc)...)
		}
		if fc := msg.GetDefaultFilterChain(); fc != nil {
			refs = append(refs, chainRefs("default_filter_chain", fc)...)
		}
		if a := msg.GetApiListener().GetApiListener(); a != nil {
			refs = append(refs, hcmRefs("api_listener.api_listener", a)...)
		}
	case *routev3.RouteConfiguration:
		for i, vh := range msg.GetVirtualHosts() {
			refs = append(refs, vhostRefs(fmt.Sprintf("virtual_hosts[%d]", i), vh)...)
		}
	case *routev3.VirtualHost:
		refs = vhostRefs("", msg)
	case *clusterv3.Cluster:
		if msg.GetType() == clusterv3.Cluster_EDS {
			name, path := msg.GetEdsClusterConfig().GetServiceName(), "eds_cluster_config.service_name"
			if name == "" {
				name, path = msg.GetName(), "name"
			}
			refs = append(refs, Ref{Path: path, Type: Endpoint, Name: name})
		}
	}
	return refs
}

func chainRefs(path string, fc *listenerv3.FilterChain) []Ref {
	var refs []Ref
	for j, f := range fc.GetFilters() {
		if a := f.GetTypedConfig(); a != nil {
			refs = append(refs, hcmRefs(fmt.Sprintf("%s.filters[%d].typed_config", path, j), a)...)
		}
	}
	return refs
}

func hcmRefs(path string, a *anypb.Any) []Ref {
	if a.GetTypeUrl() != hcmURL {
		return nil
	}
	var hcm hcmv3.HttpConnectionManager
	if a.UnmarshalTo(&hcm) != nil {
		return nil // ValidateDeep reports it
	}
	if rds := hcm.GetRds(); rds != nil {
		return []Ref{{Path: path + "(" + string(hcm.ProtoReflect().Descriptor().FullName()) + ").rds.route_config_name", Type: Route, Name: rds.GetRouteConfigName()}}
	}
	return nil
}

func vhostRefs(path string, vh *routev3.VirtualHost) []Ref {
	var refs []Ref
	for j, r := range vh.GetRoutes() {
		ra := r.GetRoute()
		if ra == nil {
			continue
		}
		p := join(path, fmt.Sprintf("routes[%d].route", j))
		if c := ra.GetCluster(); c != "" {
			refs = append(refs, Ref{Path: p + ".cluster", Type: Cluster, Name: c})
		}
		for k, wc := range ra.GetWeightedClusters().GetClusters() {
			refs = append(refs, Ref{Path: fmt.Sprintf("%s.weighted_clusters.clusters[%d].name", p, k), Type: Cluster, Name: wc.GetName()})
		}
		for k, mp := range ra.GetRequestMirrorPolicies() {
			if c := mp.GetCluster(); c != "" {
				refs = append(refs, Ref{Path: fmt.Sprintf("%s.request_mirror_policies[%d].cluster", p, k), Type: Cluster, Name: c})
			}
		}
	}
	return refs
}
