package resource_test

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestTypeRoundTrip checks, for every type, that its URL, name and Go
// message agree, and that a resource survives Marshal and Unmarshal with
// its name.
func TestTypeRoundTrip(t *testing.T) {
	named := map[*resource.Type]proto.Message{
		resource.Cluster:         &clusterv3.Cluster{Name: "x"},
		resource.Endpoint:        &endpointv3.ClusterLoadAssignment{ClusterName: "x"},
		resource.Listener:        &listenerv3.Listener{Name: "x"},
		resource.Route:           &routev3.RouteConfiguration{Name: "x"},
		resource.ScopedRoute:     &routev3.ScopedRouteConfiguration{Name: "x"},
		resource.VirtualHost:     &routev3.VirtualHost{Name: "x"},
		resource.Secret:          &tlsv3.Secret{Name: "x"},
		resource.Runtime:         &runtimev3.Runtime{Name: "x"},
		resource.ExtensionConfig: &corev3.TypedExtensionConfig{Name: "x"},
		resource.LbEndpoint:      &endpointv3.LbEndpoint{LoadBalancingWeight: wrapperspb.UInt32(2)},
	}
	if got, want := len(resource.All()), len(named); got != want {
		t.Fatalf("len(All()) = %d, want %d: a type was added without a test case", got, want)
	}
	for _, typ := range resource.All() {
		t.Run(typ.Name, func(t *testing.T) {
			msg, ok := named[typ]
			if !ok {
				t.Fatalf("no test message for %s", typ)
			}
			if got, ok := resource.ByURL(typ.URL); !ok || got != typ {
				t.Errorf("ByURL(%q) = %v, %v; want %v", typ.URL, got, ok, typ)
			}
			if got, ok := resource.ByName(typ.Name); !ok || got != typ {
				t.Errorf("ByName(%q) = %v, %v; want %v", typ.Name, got, ok, typ)
			}
			for _, s := range []string{typ.Name, typ.URL, strings.ToUpper(typ.Name)} {
				if got, err := resource.Lookup(s); err != nil || got != typ {
					t.Errorf("Lookup(%q) = %v, %v; want %v", s, got, err, typ)
				}
			}
			// The URL names the Go message New returns.
			a, err := anypb.New(typ.New())
			if err != nil {
				t.Fatal(err)
			}
			if a.GetTypeUrl() != typ.URL {
				t.Errorf("New() is a %s, want %s", a.GetTypeUrl(), typ.URL)
			}
			if want := map[bool]string{false: "x", true: ""}[typ.Unnamed]; typ.NameOf(msg) != want {
				t.Errorf("NameOf = %q, want %q", typ.NameOf(msg), want)
			}
			body, err := resource.Marshal(typ, msg)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if body.GetTypeUrl() != typ.URL {
				t.Errorf("Marshal type URL = %q, want %q", body.GetTypeUrl(), typ.URL)
			}
			got, err := resource.Unmarshal(typ, body.GetValue())
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if diff := cmp.Diff(msg, got, protocmp.Transform()); diff != "" {
				t.Errorf("Unmarshal(Marshal(m)) differs (-want +got):\n%s", diff)
			}
			if got := typ.String(); got != typ.Name {
				t.Errorf("String() = %q, want %q", got, typ.Name)
			}
		})
	}
}

func TestTypeOrder(t *testing.T) {
	// Promise 6 (docs/concepts/design.md): CDS, EDS, LDS, RDS, SRDS, VHDS, then the
	// rest.
	want := []string{"cluster", "endpoint", "listener", "route", "scoped-route", "virtual-host"}
	all := resource.All()
	for i, typ := range all {
		if typ.Order != i {
			t.Errorf("%s.Order = %d, want %d", typ, typ.Order, i)
		}
		if i < len(want) && typ.Name != want[i] {
			t.Errorf("All()[%d] = %s, want %s", i, typ, want[i])
		}
	}
	for _, tc := range []struct {
		typ  *resource.Type
		want bool
	}{
		{resource.Cluster, true},
		{resource.Listener, true},
		{resource.Endpoint, false},
		{resource.Route, false},
	} {
		if tc.typ.Wildcard != tc.want {
			t.Errorf("%s.Wildcard = %v, want %v", tc.typ, tc.typ.Wildcard, tc.want)
		}
	}
	// Removals go referring types first: listeners before routes before
	// clusters before endpoints, each type at its own place.
	for _, pair := range [][2]*resource.Type{
		{resource.Listener, resource.Route},
		{resource.ScopedRoute, resource.Route},
		{resource.Route, resource.Cluster},
		{resource.VirtualHost, resource.Cluster},
		{resource.Cluster, resource.Endpoint},
	} {
		if a, b := resource.DeleteOrder(pair[0]), resource.DeleteOrder(pair[1]); a >= b {
			t.Errorf("DeleteOrder(%s) = %d, not before DeleteOrder(%s) = %d", pair[0], a, pair[1], b)
		}
	}
	seen := map[int]*resource.Type{}
	for _, typ := range all {
		o := resource.DeleteOrder(typ)
		if other, ok := seen[o]; ok {
			t.Errorf("DeleteOrder(%s) = DeleteOrder(%s) = %d", typ, other, o)
		}
		seen[o] = typ
	}
}

func TestTypeAliases(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want *resource.Type
	}{
		{"clusters", resource.Cluster},
		{"cds", resource.Cluster},
		{"CDS", resource.Cluster},
		{"Cluster", resource.Cluster},
		{"endpoints", resource.Endpoint},
		{"eds", resource.Endpoint},
		{"cla", resource.Endpoint},
		{"listeners", resource.Listener},
		{"lds", resource.Listener},
		{"routes", resource.Route},
		{"rds", resource.Route},
		{"scoped-routes", resource.ScopedRoute},
		{"srds", resource.ScopedRoute},
		{"virtual-hosts", resource.VirtualHost},
		{"vhds", resource.VirtualHost},
		{"secrets", resource.Secret},
		{"sds", resource.Secret},
		{"runtimes", resource.Runtime},
		{"rtds", resource.Runtime},
		{"extension-configs", resource.ExtensionConfig},
		{"ecds", resource.ExtensionConfig},
		{"lb-endpoints", resource.LbEndpoint},
		{"leds", resource.LbEndpoint},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := resource.Lookup(tc.in)
			if err != nil || got != tc.want {
				t.Errorf("Lookup(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
	// No alias is claimed by two types (the registry would keep the last).
	for _, typ := range resource.All() {
		for _, a := range typ.Aliases {
			if got, _ := resource.ByName(a); got != typ {
				t.Errorf("alias %q of %s resolves to %v", a, typ, got)
			}
			if _, ok := resource.ByURL(a); ok {
				t.Errorf("alias %q resolves as a URL", a)
			}
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	for _, in := range []string{"foo", "", "type.googleapis.com/envoy.config.cluster.v3.Clusterr", "cluster/"} {
		t.Run(in, func(t *testing.T) {
			got, err := resource.Lookup(in)
			if err == nil {
				t.Fatalf("Lookup(%q) = %v, want an error", in, got)
			}
			want := `unknown resource type "` + in + `" (known: cluster, endpoint, extension-config, lb-endpoint, listener, route, runtime, scoped-route, secret, virtual-host)`
			if err.Error() != want {
				t.Errorf("Lookup(%q) error:\n got %s\nwant %s", in, err, want)
			}
		})
	}
	if got, want := strings.Join(resource.Names(), ","), "cluster,endpoint,extension-config,lb-endpoint,listener,route,runtime,scoped-route,secret,virtual-host"; got != want {
		t.Errorf("Names() = %s, want %s", got, want)
	}
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		wantErr string // "" for valid
	}{
		{"plain", "backend-a", ""},
		{"slashes and dots", "outbound|8080||svc.ns.svc.cluster.local/x", ""},
		{"unicode", "café", ""},
		{"longest", strings.Repeat("a", resource.MaxNameLen), ""},
		{"empty", "", "empty name: every resource needs a non-empty name"},
		{"too long", strings.Repeat("a", resource.MaxNameLen+1), "name is 1025 bytes long, more than the 1024 allowed"},
		{"newline", "a\nb", `name "a\nb" holds a control character`},
		{"nul", "a\x00", `name "a\x00" holds a control character`},
		{"del", "a\x7f", `name "a\x7f" holds a control character`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := resource.ValidateName(tc.in)
			if got := errString(err); got != tc.wantErr {
				t.Errorf("ValidateName(%q) = %q, want %q", tc.in, got, tc.wantErr)
			}
		})
	}
}

func TestValidateScope(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		wantErr string
	}{
		{"default", "default", ""},
		{"group", "edge-eu.west_1", ""},
		{"longest", strings.Repeat("s", 253), ""},
		{"empty", "", "empty scope"},
		{"too long", strings.Repeat("s", 254), `scope "` + strings.Repeat("s", 254) + `" is longer than 253 bytes`},
		{"slash", "a/b", `scope "a/b" holds '/': scopes may not hold '/', spaces or control characters`},
		{"space", "a b", `scope "a b" holds ' ': scopes may not hold '/', spaces or control characters`},
		{"control", "a\tb", `scope "a\tb" holds '\t': scopes may not hold '/', spaces or control characters`},
		{"reserved", "~rollout.x", `scope "~rollout.x" begins with "~", which is reserved for rollouts' canary overlays`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := resource.ValidateScope(tc.in)
			if got := errString(err); got != tc.wantErr {
				t.Errorf("ValidateScope(%q) = %q, want %q", tc.in, got, tc.wantErr)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
