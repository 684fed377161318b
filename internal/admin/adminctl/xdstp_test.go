package adminctl

import (
	"fmt"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// xdstpCluster is an EDS cluster named name whose endpoints are the
// ClusterLoadAssignment named eds, both quoted for YAML.
func xdstpCluster(name, eds string) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: %q
type: EDS
eds_cluster_config:
  eds_config: {ads: {}, resource_api_version: V3}
  service_name: %q
connect_timeout: 1s
`, name, eds)
}

// TestXDSTPNames: xdstp:// names (xRFC TP1) are taken by apply, get,
// delete and --check-references like any name, stored in their
// normalized form, so that another spelling of one name (its context
// parameters in another order, another percent-encoding) is the same
// resource; a name whose type segment is not its resource's, or that
// does not parse, is refused with a clear error and nothing written.
func TestXDSTPNames(t *testing.T) {
	e := startEnv(t, storetest.Options{})
	const (
		cds  = "xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc"
		eds  = "xdstp://fed-a/envoy.config.endpoint.v3.ClusterLoadAssignment/svc"
		norm = cds + "?env=prod&zone=b"
	)

	t.Run("stored normalized, found by any spelling", func(t *testing.T) {
		h := e.newHarness(t)
		h.serving("r1", "fed-a")
		in := docs(xdstpCluster(cds+"?zone=b&env=prod", eds+"?zone=b"), endpointYAML(`"`+eds+`?zone=%62"`, 80))
		if r := h.runStdin(in, "apply", "-f", "-", "--check-references", "--strict"); r.code != 0 || r.stderr != "" {
			t.Fatalf("apply: %s", r)
		}
		var names []string
		for _, res := range h.list() {
			names = append(names, res.Key.Name)
		}
		if want := []string{norm, eds + "?zone=b"}; strings.Join(names, " ") != strings.Join(want, " ") {
			t.Errorf("stored %q, want %q", names, want)
		}
		out := h.mustRun("get", "cluster", cds+"?zone=%62&env=prod", "--scope", "default", "-o", "yaml")
		if !strings.Contains(out, "name: "+norm) {
			t.Errorf("get by another spelling:\n%s\nwant the cluster named %s", out, norm)
		}
		for auth, want := range map[string]int{"fed-a": 1, "fed-b": 0, "": 0} {
			out := h.mustRun("get", "cluster", "--authority", auth, "-o", "json")
			if got := strings.Count(out, `"name": "xdstp://`); got != want {
				t.Errorf("get cluster --authority %q: %d clusters, want %d:\n%s", auth, got, want, out)
			}
		}
		h.mustRun("delete", "cluster", cds+"?zone=b&env=prod")
		if got := len(h.list()); got != 1 {
			t.Errorf("%d resources after deleting the cluster by another spelling, want the endpoints only", got)
		}
	})

	t.Run("bad names", func(t *testing.T) {
		h := e.newHarness(t)
		h.serving("r1", "fed-a")
		for _, c := range []struct{ in, want string }{
			{xdstpCluster("xdstp://fed-a/envoy.config.listener.v3.Listener/svc", "svc"), `type segment "envoy.config.listener.v3.Listener" is not "envoy.config.cluster.v3.Cluster"`},
			{xdstpCluster(cds+"?zone", "svc"), "xdstp"},
			{xdstpCluster(cds+"/*", "svc"), "glob collection"},
			{xdstpCluster("svc", cds), `type segment "envoy.config.cluster.v3.Cluster" is not "envoy.config.endpoint.v3.ClusterLoadAssignment"`},
			{xdstpCluster("xdstp://fed-b/envoy.config.cluster.v3.Cluster/svc", "svc"),
				`no registered replica serves -: document 1: cluster "xdstp://fed-b/envoy.config.cluster.v3.Cluster/svc": authority "fed-b" (the replicas serve "fed-a", by xds-node --authority)`},
		} {
			r := h.runStdin(c.in, "apply", "-f", "-", "--check-references", "--strict")
			if r.code == 0 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("apply:\n%s\ngot %s\nwant an error saying %s", c.in, r, c.want)
			}
		}
		if r := h.run("delete", "cluster", "xdstp://fed-a/envoy.config.route.v3.RouteConfiguration/r"); r.code == 0 || !strings.Contains(r.stderr, "type segment") {
			t.Errorf("delete a cluster by a route's name: %s", r)
		}
		if got := len(h.list()); got != 0 {
			t.Errorf("%d resources stored after refused applies, want none", got)
		}
	})
}

// TestLEDSRoundTrip: LbEndpoints, which hold no name of their own, are
// applied in the discovery.v3.Resource wrapper that names them, shown by
// get in the same wrapper (YAML and JSON), and what get prints applies
// back unchanged; a ClusterLoadAssignment names their collection.
func TestLEDSRoundTrip(t *testing.T) {
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	const member = "xdstp://leds/envoy.config.endpoint.v3.LbEndpoint/c1/e1"
	in := docs(`"@type": type.googleapis.com/envoy.service.discovery.v3.Resource
name: "`+member+`?b=2&a=1"
resource:
  "@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
  endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}
`, `"@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: c1
endpoints:
- leds_cluster_locality_config:
    leds_config: {ads: {}, resource_api_version: V3}
    leds_collection_name: "xdstp://leds/envoy.config.endpoint.v3.LbEndpoint/c1/*"
`)
	if r := h.runStdin(in, "apply", "-f", "-"); r.code != 0 {
		t.Fatalf("apply: %s", r)
	}
	for _, format := range []string{"yaml", "json"} {
		out := h.mustRun("get", "leds", "-o", format)
		if !strings.Contains(out, "envoy.service.discovery.v3.Resource") || !strings.Contains(out, member+"?a=1&b=2") {
			t.Fatalf("get leds -o %s:\n%s\nwant the member in its wrapper, under its normalized name", format, out)
		}
		if r := h.runStdin(out, "apply", "-f", "-"); r.code != 0 || !strings.Contains(r.stdout, "unchanged") {
			t.Errorf("apply of get -o %s: %s; want it unchanged", format, r)
		}
	}
}

// serving registers a replica called name serving authorities.
func (h *harness) serving(name string, authorities ...string) {
	h.register(shard.Member{Name: name, XDSAddr: "127.0.0.1:18000", Authorities: authorities})
}

// TestApplyUnservedAuthority: apply refuses, writing nothing, a resource
// named for an xdstp:// authority that no registered replica serves;
// --allow-unserved-authority writes it; with no replica registered the
// authorities are unknown, and apply writes after a warning saying so.
// Old-style and xdstp:/// names are never checked.
func TestApplyUnservedAuthority(t *testing.T) {
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	in := xdstpCluster("xdstp://fed-b/envoy.config.cluster.v3.Cluster/svc", "svc")
	if r := h.runStdin(in, "apply", "-f", "-"); r.code != 0 || !strings.Contains(r.stderr, "warning: no replica is registered") {
		t.Fatalf("apply with no replica registered: %s; want it written after a warning", r)
	}
	h.mustRun("delete", "cluster", "xdstp://fed-b/envoy.config.cluster.v3.Cluster/svc")

	h.serving("r1", "fed-a")
	h.serving("r2")
	r := h.runStdin(in, "apply", "-f", "-")
	if r.code == 0 || !strings.Contains(r.stderr, `authority "fed-b" (the replicas serve "fed-a", by xds-node --authority); nothing written; --allow-unserved-authority writes it anyway`) {
		t.Fatalf("apply of an unserved authority: %s", r)
	}
	if got := len(h.list()); got != 0 {
		t.Fatalf("%d resources written by a refused apply", got)
	}
	for _, served := range []string{xdstpCluster("xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc", "svc"),
		xdstpCluster("xdstp:///envoy.config.cluster.v3.Cluster/svc", "svc"), xdstpCluster("svc", "svc")} {
		if r := h.runStdin(served, "apply", "-f", "-"); r.code != 0 || r.stderr != "" {
			t.Errorf("apply of a served name: %s", r)
		}
	}
	if r := h.runStdin(in, "apply", "-f", "-", "--allow-unserved-authority"); r.code != 0 {
		t.Fatalf("apply --allow-unserved-authority: %s", r)
	}
	if got := len(h.list()); got != 4 {
		t.Errorf("%d resources stored, want 4", got)
	}
}
