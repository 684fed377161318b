package adminctl

import (
	"fmt"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/testkit/storetest"
)

// routeYAML is a route configuration name routing / to cluster.
func routeYAML(name, cluster string) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: %s
virtual_hosts:
- name: vh
  domains: ["*"]
  routes:
  - match: {prefix: /}
    route: {cluster: %s}
`, name, cluster)
}

// rdsListenerYAML is an API listener taking route configuration route
// over RDS.
func rdsListenerYAML(name, route string) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: %s
api_listener:
  api_listener:
    "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
    stat_prefix: %s
    rds: {route_config_name: %s, config_source: {ads: {}}}
    http_filters:
    - {name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
`, name, name, route)
}

// TestCheckReferences: --check-references warns about names that resolve
// neither in the input nor in etcd (scope, then default), and --strict
// makes them errors that write nothing.
func TestCheckReferences(t *testing.T) {
	e := startEnv(t, storetest.Options{})
	const hcm = "api_listener.api_listener(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager)"

	t.Run("examples resolve", func(t *testing.T) {
		h := e.newHarness(t)
		r := h.run("apply", "-f", examples, "--check-references", "--strict")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("apply examples --check-references --strict: %s", r)
		}
	})

	t.Run("missing references warn", func(t *testing.T) {
		h := e.newHarness(t)
		in := docs(rdsListenerYAML("l", "nope-route"), routeYAML("r", "nope-cluster"), clusterYAML("c", "1s"))
		r := h.runStdin(in, "apply", "-f", "-", "--check-references")
		if r.code != 0 {
			t.Fatalf("apply --check-references: %s", r)
		}
		want := `warning: -: document 1 (listener "l"): ` + hcm + `.rds.route_config_name: route "nope-route" is neither in the input nor in scope "default"
warning: -: document 2 (route "r"): virtual_hosts[0].routes[0].route.cluster: cluster "nope-cluster" is neither in the input nor in scope "default"
warning: -: document 3 (cluster "c"): eds_cluster_config.service_name: endpoint "c" is neither in the input nor in scope "default"
`
		if r.stderr != want {
			t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
		}
		if got := len(h.list()); got != 3 {
			t.Errorf("%d resources stored, want the 3 applied (warnings do not stop an apply)", got)
		}
	})

	t.Run("strict writes nothing", func(t *testing.T) {
		h := e.newHarness(t)
		r := h.runStdin(docs(routeYAML("r", "nope-cluster"), clusterYAML("c", "1s"), endpointYAML("c", 80)),
			"apply", "-f", "-", "--check-references", "--strict")
		want := "xdsadmin: --strict: 1 missing reference(s), nothing written:\n  -: document 1 (route \"r\"): virtual_hosts[0].routes[0].route.cluster: cluster \"nope-cluster\" is neither in the input nor in scope \"default\"\n"
		if r.code == 0 || r.stderr != want {
			t.Errorf("got %s\nwant stderr:\n%s", r, want)
		}
		if got := h.list(); len(got) != 0 {
			t.Errorf("%d resources stored after a --strict failure, want none", len(got))
		}
	})

	t.Run("resolved in etcd, the group's default scope included", func(t *testing.T) {
		h := e.newHarness(t)
		h.mustRun("apply", "-f", examples) // clusters, endpoints and routes in default
		r := h.runStdin(docs(rdsListenerYAML("l", "ingress-routes"), routeYAML("r", "backend-a")),
			"apply", "-f", "-", "--scope", "edge", "--check-references", "--strict")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("apply --scope edge --check-references --strict: %s", r)
		}
		r = h.runStdin(routeYAML("r2", "only-in-other"), "apply", "-f", "-", "--scope", "edge", "--check-references")
		if !strings.Contains(r.stderr, `cluster "only-in-other" is neither in the input nor in scope "edge" or "default"`) {
			t.Errorf("stderr %q, want the missing cluster with both scopes", r.stderr)
		}
	})

	t.Run("strict needs check-references", func(t *testing.T) {
		h := e.newHarness(t)
		r := h.run("apply", "-f", examples, "--strict")
		if r.code == 0 || r.stderr != "xdsadmin: --strict needs --check-references\n" {
			t.Errorf("got %s", r)
		}
	})
}
