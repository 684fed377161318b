package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// ClusterName is the name of cluster i of the fixture, which is also its
// EDS service name.
func ClusterName(i int) string { return fmt.Sprintf("lg-cluster-%05d", i) }

// EndpointSet is the endpoints of one cluster: n addresses on port port.
// The same (cluster, n, port) always gives the same set.
type EndpointSet struct {
	Cluster   string   `json:"cluster"`
	Addresses []string `json:"addresses"`
	Port      uint32   `json:"port"`
}

// Endpoints is cluster i's set of n endpoints on port.
func Endpoints(i, n int, port uint32) EndpointSet {
	s := EndpointSet{Cluster: ClusterName(i), Port: port, Addresses: make([]string, n)}
	for j := range n {
		s.Addresses[j] = fmt.Sprintf("10.%d.%d.%d", (i>>8)&0xff, i&0xff, j%250+1)
	}
	return s
}

// ListenerName and RouteName are the names of listener i of the fixture
// and of its route configuration.
func ListenerName(i int) string { return fmt.Sprintf("lg-listener-%05d", i) }

// RouteName: see ListenerName.
func RouteName(i int) string { return fmt.Sprintf("lg-route-%05d", i) }

// ListenerResource is listener i: on 0.0.0.0, port 20000+i, one HTTP
// connection manager taking route configuration RouteName(i) over ADS.
func ListenerResource(i int) (*listenerv3.Listener, error) {
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix:     ListenerName(i),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: RouteName(i), ConfigSource: ads}},
		HttpFilters:    []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name: ListenerName(i),
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(20000 + i)}}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm}}}}},
	}, nil
}

// RouteResource is route configuration RouteName(i): every host and path
// to cluster.
func RouteResource(i int, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: RouteName(i), VirtualHosts: []*routev3.VirtualHost{{
		Name:    RouteName(i),
		Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

// ClusterResource is an EDS cluster whose endpoints (service name: its
// own name) come over ADS.
func ClusterResource(name string) *clusterv3.Cluster {
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
	return &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: ads},
	}
}

// LoadAssignment is the ClusterLoadAssignment of s: one locality, each
// endpoint of weight 1.
func (s EndpointSet) LoadAssignment() *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, 0, len(s.Addresses))
	for _, a := range s.Addresses {
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: a, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: s.Port}}}},
			}},
			LoadBalancingWeight: wrapperspb.UInt32(1),
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: s.Cluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		Locality:            &corev3.Locality{Zone: "z1"},
		LbEndpoints:         lbs,
		LoadBalancingWeight: wrapperspb.UInt32(1),
	}}}
}

// Commit is a write a Target made: the version clients see it at, and
// when the write returned.
type Commit struct {
	// Version is what a response's version_info (SotW) or
	// system_version_info (delta) reaches once it carries the write: the
	// etcd revision for Legation, the snapshot version for go-control-plane.
	Version int64
	// Sent is when the write was sent (after its plan was read); latencies
	// are measured from it, so they include the write's own round trip.
	Sent time.Time
	// At is when the write returned to the load generator.
	At time.Time
}

// Fixture is what a seed writes: clusters, their endpoints, and listeners
// each with its route configuration (route i sends everything to cluster
// i modulo the clusters).
type Fixture struct {
	Clusters  []string      `json:"clusters"`
	Endpoints []EndpointSet `json:"endpoints"`
	Listeners int           `json:"listeners"`
}

// Target is where the scenario writes. Its methods are called from one
// goroutine.
type Target interface {
	// Seed writes the fixture, replacing whatever an earlier one held.
	Seed(ctx context.Context, fx Fixture) (Commit, error)
	// SetEndpoints replaces one cluster's endpoints.
	SetEndpoints(ctx context.Context, set EndpointSet) (Commit, error)
}

// StoreTarget writes to etcd through a store.Store, as xdsadmin apply
// does: one transaction per update.
type StoreTarget struct {
	Store *store.Store
	// Scope is the scope the fixture is written in. Empty: the default
	// scope, which every node sees.
	Scope string
}

func (t *StoreTarget) scope() string {
	if t.Scope == "" {
		return store.DefaultScope
	}
	return t.Scope
}

var _ Target = (*StoreTarget)(nil)

// Seed writes the fixture in one chunked apply (so a fixture beyond
// etcd's transaction limits is written in parts, clusters first), and
// deletes the fixture resources of an earlier, larger run (named as
// ClusterName, ListenerName and RouteName name them) that it does not
// name. Other resources are left alone.
func (t *StoreTarget) Seed(ctx context.Context, fx Fixture) (Commit, error) {
	puts := make([]store.Put, 0, len(fx.Clusters)+len(fx.Endpoints)+2*fx.Listeners)
	named := map[store.Key]bool{}
	var deletes []store.Key
	for i := range fx.Listeners {
		l, err := ListenerResource(i)
		if err != nil {
			return Commit{}, err
		}
		p, err := t.put(resource.Listener, l)
		if err != nil {
			return Commit{}, err
		}
		puts = append(puts, p)
		if p, err = t.put(resource.Route, RouteResource(i, fx.Clusters[i%len(fx.Clusters)])); err != nil {
			return Commit{}, err
		}
		puts = append(puts, p)
	}
	for _, c := range fx.Clusters {
		p, err := t.put(resource.Cluster, ClusterResource(c))
		if err != nil {
			return Commit{}, err
		}
		puts = append(puts, p)
	}
	for _, s := range fx.Endpoints {
		p, err := t.put(resource.Endpoint, s.LoadAssignment())
		if err != nil {
			return Commit{}, err
		}
		puts = append(puts, p)
	}
	for _, p := range puts {
		named[p.Key] = true
	}
	for _, typ := range []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route} {
		l, err := t.Store.List(ctx, store.ListOptions{Type: typ, Scope: t.scope()})
		if err != nil {
			return Commit{}, err
		}
		for _, r := range l.Resources {
			if strings.HasPrefix(r.Name, "lg-") && !named[r.Key] {
				deletes = append(deletes, r.Key)
			}
		}
	}
	return t.apply(ctx, store.PlanRequest{Puts: puts, Deletes: deletes}, true)
}

// SetEndpoints writes one ClusterLoadAssignment; it is an error if it is
// unchanged (no revision would carry it).
func (t *StoreTarget) SetEndpoints(ctx context.Context, set EndpointSet) (Commit, error) {
	p, err := t.put(resource.Endpoint, set.LoadAssignment())
	if err != nil {
		return Commit{}, err
	}
	c, err := t.apply(ctx, store.PlanRequest{Puts: []store.Put{p}}, false)
	if err != nil {
		return Commit{}, err
	}
	if c.Version == 0 {
		return Commit{}, fmt.Errorf("loadgen: endpoints of %s are already what the update writes", set.Cluster)
	}
	return c, nil
}

// apply plans and applies req; Version is 0 when there was nothing to
// write, and the plan's revision for a seed.
func (t *StoreTarget) apply(ctx context.Context, req store.PlanRequest, seed bool) (Commit, error) {
	plan, err := t.Store.MakePlan(ctx, req)
	if err != nil {
		return Commit{}, err
	}
	sent := time.Now()
	res, err := t.Store.Apply(ctx, plan, store.ApplyOptions{Chunked: seed})
	if err != nil {
		return Commit{}, err
	}
	at := time.Now()
	if len(res.Revisions) == 0 && !seed {
		return Commit{Sent: sent, At: at}, nil
	}
	return Commit{Version: res.Revision, Sent: sent, At: at}, nil
}

func (t *StoreTarget) put(typ *resource.Type, m proto.Message) (store.Put, error) {
	body, err := resource.Marshal(typ, m)
	if err != nil {
		return store.Put{}, fmt.Errorf("loadgen: %s %s: %w", typ.Name, typ.NameOf(m), err)
	}
	return store.Put{Key: store.Key{Type: typ, Scope: t.scope(), Name: typ.NameOf(m)}, Body: body}, nil
}

// HTTPTarget writes through the control endpoint of the go-control-plane
// server of bench/gcp: POST /seed and POST /endpoints, JSON in, and
// {"version": N} out, N being the snapshot version the write made.
type HTTPTarget struct {
	// URL is the server's control base URL, as http://127.0.0.1:18101.
	URL    string
	Client *http.Client
}

var _ Target = (*HTTPTarget)(nil)

// ControlResponse is the body answered by POST /seed and /endpoints.
type ControlResponse struct {
	Version int64 `json:"version"`
}

// Seed posts the fixture to /seed.
func (t *HTTPTarget) Seed(ctx context.Context, fx Fixture) (Commit, error) {
	return t.post(ctx, "/seed", fx)
}

// SetEndpoints posts /endpoints.
func (t *HTTPTarget) SetEndpoints(ctx context.Context, set EndpointSet) (Commit, error) {
	return t.post(ctx, "/endpoints", set)
}

func (t *HTTPTarget) post(ctx context.Context, path string, body any) (Commit, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return Commit{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+path, bytes.NewReader(b))
	if err != nil {
		return Commit{}, fmt.Errorf("loadgen: control URL %q: %w", t.URL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	c := t.Client
	if c == nil {
		c = http.DefaultClient
	}
	sent := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return Commit{}, fmt.Errorf("loadgen: POST %s%s: %w", t.URL, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	at := time.Now()
	if err != nil {
		return Commit{}, fmt.Errorf("loadgen: POST %s%s: %w", t.URL, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Commit{}, fmt.Errorf("loadgen: POST %s%s: %s: %s", t.URL, path, resp.Status, bytes.TrimSpace(out))
	}
	var cr ControlResponse
	if err := json.Unmarshal(out, &cr); err != nil {
		return Commit{}, fmt.Errorf("loadgen: POST %s%s: answer %q: %w", t.URL, path, out, err)
	}
	if cr.Version <= 0 {
		return Commit{}, errors.New("loadgen: POST " + t.URL + path + ": version " + strconv.FormatInt(cr.Version, 10) + " is not positive")
	}
	return Commit{Version: cr.Version, Sent: sent, At: at}, nil
}
