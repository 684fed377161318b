package resource_test

import (
	"errors"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
)

const hcmType = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

// listenerYAML is a listener whose one network filter is an
// HttpConnectionManager with the given stat_prefix and http_filters (YAML
// list items, indented for their place).
func listenerYAML(statPrefix, httpFilters string) string {
	return `"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: l
address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/` + hcmType + `
      stat_prefix: "` + statPrefix + `"
      rds: {route_config_name: r, config_source: {ads: {}, resource_api_version: V3}}
      http_filters:
` + httpFilters
}

const (
	routerFilter = `      - name: envoy.filters.http.router
        typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
`
	faultFilter = `      - name: envoy.filters.http.fault
        typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault}
`
)

func TestDecodeDeepValidation(t *testing.T) {
	const l = `in.yaml: document 1 (listener "l"): `
	hcm := "filter_chains[0].filters[0].typed_config(" + hcmType + ")"
	for _, tc := range []struct {
		name string
		in   string
		want string // "" for valid
	}{
		{"valid", listenerYAML("ingress", faultFilter+routerFilter), ""},
		{"router only", listenerYAML("ingress", routerFilter), ""},
		{"router in a TypedStruct", listenerYAML("ingress", `      - name: envoy.filters.http.router
        typed_config: {"@type": type.googleapis.com/xds.type.v3.TypedStruct, type_url: "`+resource.RouterURL+`"}
`), ""},
		{"empty stat_prefix", listenerYAML("", routerFilter),
			l + hcm + ".stat_prefix: value length must be at least 1 runes"},
		{"router not last", listenerYAML("ingress", routerFilter+faultFilter),
			l + hcm + ".http_filters[0]: the router filter (" + resource.RouterURL + ") must be the last HTTP filter, not 1 of 2"},
		{"no router", listenerYAML("ingress", faultFilter),
			l + hcm + `.http_filters[0]: last HTTP filter "envoy.filters.http.fault" is not the router (` + resource.RouterURL + `): the last HTTP filter must be the router`},
		{"no http filters", listenerYAML("ingress", ""),
			l + hcm + ".http_filters: no router filter (" + resource.RouterURL + "): the last HTTP filter must be the router"},
		{"unknown filter config type", listenerYAML("ingress", `      - name: x
        typed_config: {"@type": type.googleapis.com/example.Nope}
`+routerFilter),
			l + hcm + `.http_filters[0].typed_config: unknown type "type.googleapis.com/example.Nope": not an Envoy extension type this xdsadmin knows`},
		{"rule two Anys deep", listenerYAML("ingress", `      - name: envoy.filters.http.fault
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
          max_active_faults: 1
          abort: {http_status: 99, percentage: {numerator: 1}}
`+routerFilter),
			l + hcm + ".http_filters[0].typed_config(envoy.extensions.filters.http.fault.v3.HTTPFault).abort.http_status: value must be inside range [200, 600)"},
		{"two violations", listenerYAML("", routerFilter+faultFilter),
			l + hcm + ".stat_prefix: value length must be at least 1 runes; " +
				l[len(l):] + hcm + ".http_filters[0]: the router filter (" + resource.RouterURL + ") must be the last HTTP filter, not 1 of 2"},
		{"route typed_per_filter_config map", `"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: r
typed_per_filter_config:
  envoy.filters.http.fault:
    "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
    abort: {http_status: 700, percentage: {numerator: 1}}
`, `in.yaml: document 1 (route "r"): typed_per_filter_config["envoy.filters.http.fault"](envoy.extensions.filters.http.fault.v3.HTTPFault).abort.http_status: value must be inside range [200, 600)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := resource.Decode("in.yaml", []byte(tc.in))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				for _, d := range docs {
					checkDoc(t, d)
				}
				return
			}
			var de *resource.DocError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %v, %v (%T); want a *resource.DocError", ids(docs), err, err)
			}
			if got := errString(err); got != tc.want {
				t.Errorf("error:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestValidateDeepBinary checks what reaches the store without going
// through JSON: an Any of an unknown type decodes in binary, and only the
// deep walk finds it.
func TestValidateDeepBinary(t *testing.T) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		t.Fatal(err)
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix:     "s",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: "r"}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: "x", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/example.Nope", Value: []byte{1, 2}}}},
			{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}},
		},
	}
	hcmAny, err := anypb.New(hcm)
	if err != nil {
		t.Fatal(err)
	}
	lis := &listenerv3.Listener{Name: "l", ApiListener: &listenerv3.ApiListener{ApiListener: hcmAny}}
	err = resource.Check(lis)
	want := "api_listener.api_listener(" + hcmType + `).http_filters[0].typed_config: unknown type "type.googleapis.com/example.Nope": not an Envoy extension type this xdsadmin knows`
	if err == nil || err.Error() != want {
		t.Errorf("Check = %v\nwant %s", err, want)
	}

	hcm.HttpFilters = hcm.HttpFilters[1:]
	hcm.StatPrefix = ""
	hcmAny, err = anypb.New(hcm)
	if err != nil {
		t.Fatal(err)
	}
	lis.ApiListener.ApiListener = hcmAny
	if err := resource.Check(lis); err == nil || !strings.HasSuffix(err.Error(), ").stat_prefix: value length must be at least 1 runes") {
		t.Errorf("Check = %v, want the empty stat_prefix", err)
	}
	hcm.StatPrefix = "s"
	hcmAny, err = anypb.New(hcm)
	if err != nil {
		t.Fatal(err)
	}
	lis.ApiListener.ApiListener = hcmAny
	if err := resource.Check(proto.Clone(lis)); err != nil {
		t.Errorf("Check(valid listener) = %v", err)
	}
}
