package resource

import (
	"fmt"
	"sort"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Type describes one xDS resource type. Values are immutable and shared.
type Type struct {
	// Name is the short name used in etcd keys and on the command line,
	// e.g. "cluster".
	Name string
	// URL is the v3 type URL, e.g.
	// "type.googleapis.com/envoy.config.cluster.v3.Cluster".
	URL string
	// Order is the position of the type in a make-before-break push:
	// CDS, EDS, LDS, RDS, SRDS, VHDS, then the rest (promise 6,
	// docs/concepts/design.md).
	Order int
	// Wildcard is true for the types whose SotW responses carry the full
	// set (LDS, CDS and the like): omission means removal.
	Wildcard bool
	// Aliases are other accepted spellings on the command line.
	Aliases []string
	// Unnamed is true for a type whose message has no name field
	// (LbEndpoint): its name lives only in the etcd key and, on the wire
	// and in files, in the discovery.v3.Resource wrapping it.
	Unnamed bool
	// DeltaOnly is true for a type served over delta xDS only: a SotW
	// response of bare messages could not say which of an Unnamed type's
	// resources is which.
	DeltaOnly bool

	newMsg    func() proto.Message
	nameOf    func(proto.Message) string
	desc      protoreflect.MessageDescriptor // of the type's message, set by init
	nameField protoreflect.FieldDescriptor   // the field NameOf reads, set by init
}

// New returns a new empty message of the type.
func (t *Type) New() proto.Message { return t.newMsg() }

// NameOf returns the resource name held in m, which must be of type t;
// "" for an Unnamed type.
func (t *Type) NameOf(m proto.Message) string {
	if t.Unnamed {
		return ""
	}
	return t.nameOf(m)
}

func (t *Type) String() string { return t.Name }

// The resource types, in push order.
var (
	Cluster = &Type{Name: "cluster", URL: "type.googleapis.com/envoy.config.cluster.v3.Cluster",
		Wildcard: true, Aliases: []string{"clusters", "cds"},
		newMsg: func() proto.Message { return new(clusterv3.Cluster) },
		nameOf: func(m proto.Message) string { return m.(*clusterv3.Cluster).GetName() }}
	Endpoint = &Type{Name: "endpoint", URL: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
		Aliases: []string{"endpoints", "eds", "cla"},
		newMsg:  func() proto.Message { return new(endpointv3.ClusterLoadAssignment) },
		nameOf:  func(m proto.Message) string { return m.(*endpointv3.ClusterLoadAssignment).GetClusterName() }}
	Listener = &Type{Name: "listener", URL: "type.googleapis.com/envoy.config.listener.v3.Listener",
		Wildcard: true, Aliases: []string{"listeners", "lds"},
		newMsg: func() proto.Message { return new(listenerv3.Listener) },
		nameOf: func(m proto.Message) string { return m.(*listenerv3.Listener).GetName() }}
	Route = &Type{Name: "route", URL: "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
		Aliases: []string{"routes", "rds"},
		newMsg:  func() proto.Message { return new(routev3.RouteConfiguration) },
		nameOf:  func(m proto.Message) string { return m.(*routev3.RouteConfiguration).GetName() }}
	ScopedRoute = &Type{Name: "scoped-route", URL: "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration",
		Wildcard: true, Aliases: []string{"scoped-routes", "srds"},
		newMsg: func() proto.Message { return new(routev3.ScopedRouteConfiguration) },
		nameOf: func(m proto.Message) string { return m.(*routev3.ScopedRouteConfiguration).GetName() }}
	VirtualHost = &Type{Name: "virtual-host", URL: "type.googleapis.com/envoy.config.route.v3.VirtualHost",
		Aliases: []string{"virtual-hosts", "vhds"},
		newMsg:  func() proto.Message { return new(routev3.VirtualHost) },
		nameOf:  func(m proto.Message) string { return m.(*routev3.VirtualHost).GetName() }}
	Secret = &Type{Name: "secret", URL: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
		Aliases: []string{"secrets", "sds"},
		newMsg:  func() proto.Message { return new(tlsv3.Secret) },
		nameOf:  func(m proto.Message) string { return m.(*tlsv3.Secret).GetName() }}
	Runtime = &Type{Name: "runtime", URL: "type.googleapis.com/envoy.service.runtime.v3.Runtime",
		Aliases: []string{"runtimes", "rtds"},
		newMsg:  func() proto.Message { return new(runtimev3.Runtime) },
		nameOf:  func(m proto.Message) string { return m.(*runtimev3.Runtime).GetName() }}
	ExtensionConfig = &Type{Name: "extension-config", URL: "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
		Aliases: []string{"extension-configs", "ecds"},
		newMsg:  func() proto.Message { return new(corev3.TypedExtensionConfig) },
		nameOf:  func(m proto.Message) string { return m.(*corev3.TypedExtensionConfig).GetName() }}
	// LbEndpoint is one endpoint of a LEDS collection (xRFC TP1 glob
	// collections): a ClusterLoadAssignment's leds_cluster_locality_config
	// names the collection xdstp://AUTHORITY/envoy.config.endpoint.v3.LbEndpoint/PATH/*,
	// and its members are the LbEndpoints named under PATH.
	LbEndpoint = &Type{Name: "lb-endpoint", URL: "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint",
		Aliases: []string{"lb-endpoints", "leds"}, Unnamed: true, DeltaOnly: true,
		newMsg: func() proto.Message { return new(endpointv3.LbEndpoint) }}
)

var (
	all    = []*Type{Cluster, Endpoint, Listener, Route, ScopedRoute, VirtualHost, Secret, Runtime, ExtensionConfig, LbEndpoint}
	sotw   []*Type
	byName = map[string]*Type{}
	byURL  = map[string]*Type{}
)

func init() {
	for i, t := range all {
		t.Order = i
		t.desc = t.newMsg().ProtoReflect().Descriptor()
		t.nameField = nameFieldOf(t.desc)
		byName[t.Name] = t
		for _, a := range t.Aliases {
			byName[a] = t
		}
		byURL[t.URL] = t
		if !t.DeltaOnly {
			sotw = append(sotw, t)
		}
	}
}

// All returns the types in push order. The slice must not be modified.
func All() []*Type { return all }

// SotW returns the types SotW serves (all but the DeltaOnly ones), in
// push order. The slice must not be modified.
func SotW() []*Type { return sotw }

// ByName returns the type with the given short name or alias.
func ByName(name string) (*Type, bool) {
	t, ok := byName[strings.ToLower(name)]
	return t, ok
}

// ByURL returns the type with the given type URL.
func ByURL(url string) (*Type, bool) {
	t, ok := byURL[url]
	return t, ok
}

// Lookup accepts a short name, an alias or a type URL, and returns an error
// listing the known names when it matches none.
func Lookup(s string) (*Type, error) {
	if t, ok := ByName(s); ok {
		return t, nil
	}
	if t, ok := ByURL(s); ok {
		return t, nil
	}
	return nil, fmt.Errorf("unknown resource type %q (known: %s)", s, strings.Join(Names(), ", "))
}

// Names returns the short names of all types, sorted.
func Names() []string {
	out := make([]string, 0, len(all))
	for _, t := range all {
		out = append(out, t.Name)
	}
	sort.Strings(out)
	return out
}

// DeleteOrder is the order in which removals are safe: the types that refer
// to others go first, the types referred to last (break after make).
func DeleteOrder(t *Type) int {
	switch t {
	case Listener:
		return 0
	case ScopedRoute:
		return 1
	case Route:
		return 2
	case VirtualHost:
		return 3
	case Cluster:
		return 4
	case Endpoint:
		return 5
	}
	return 6 + t.Order
}
