package resource_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/state/resource"
)

func TestRefs(t *testing.T) {
	type ref struct{ Path, Type, Name string }
	for _, tc := range []struct {
		name string
		in   string
		want []ref
	}{
		{"listener filter chain and API listener", string(readFile(t, "../../../examples/listeners.yaml")), []ref{
			{"filter_chains[0].filters[0].typed_config(" + hcmType + ").rds.route_config_name", "route", "ingress-routes"},
			{"api_listener.api_listener(" + hcmType + ").rds.route_config_name", "route", "echo-route"},
		}},
		{"route: cluster, weighted clusters, mirror", `"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: r
virtual_hosts:
- name: a
  domains: ["a"]
  routes:
  - match: {prefix: /x}
    route: {cluster: c1, request_mirror_policies: [{cluster: m}]}
  - match: {prefix: /y}
    direct_response: {status: 200}
- name: b
  domains: ["b"]
  routes:
  - match: {prefix: /}
    route: {weighted_clusters: {clusters: [{name: w1, weight: 1}, {name: w2, weight: 2}]}}
`, []ref{
			{"virtual_hosts[0].routes[0].route.cluster", "cluster", "c1"},
			{"virtual_hosts[0].routes[0].route.request_mirror_policies[0].cluster", "cluster", "m"},
			{"virtual_hosts[1].routes[0].route.weighted_clusters.clusters[0].name", "cluster", "w1"},
			{"virtual_hosts[1].routes[0].route.weighted_clusters.clusters[1].name", "cluster", "w2"},
		}},
		{"EDS cluster without service_name", "\"@type\": " + clusterURL + "\nname: a\ntype: EDS\neds_cluster_config: {eds_config: {ads: {}}}\n",
			[]ref{{"name", "endpoint", "a"}}},
		{"static cluster", "\"@type\": " + clusterURL + "\nname: a\ntype: STATIC\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := resource.Decode("in.yaml", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var got []ref
			for _, d := range docs {
				for _, r := range resource.Refs(d.Message) {
					got = append(got, ref{r.Path, r.Type.Name, r.Name})
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Refs (-want +got):\n%s", diff)
			}
		})
	}
}
