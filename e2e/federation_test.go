package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"

	"github.com/legation-io/legation/internal/replica"
)

// fedName is the xdstp name (xRFC TP1) of resource id of type msg (a
// message's full name) in authority auth.
func fedName(auth, msg, id string) string {
	return "xdstp://" + auth + "/" + msg + "/" + id
}

// federatedYAML is the chain listener -> route -> cluster -> endpoints
// for xds://auth/svc, every resource named in auth, its endpoint on
// 127.0.0.1:port.
func federatedYAML(auth string, port int) string {
	lis := fedName(auth, "envoy.config.listener.v3.Listener", "svc")
	route := fedName(auth, "envoy.config.route.v3.RouteConfiguration", "svc-route")
	cluster := fedName(auth, "envoy.config.cluster.v3.Cluster", "svc-cluster")
	eds := fedName(auth, "envoy.config.endpoint.v3.ClusterLoadAssignment", "svc-cluster")
	return strings.Join([]string{
		strings.NewReplacer("name: svc\n", fmt.Sprintf("name: %q\n", lis), "route_config_name: svc-route", fmt.Sprintf("route_config_name: %q", route)).Replace(listenerYAML(true)),
		strings.NewReplacer("name: svc-route", fmt.Sprintf("name: %q", route), `domains: ["svc"]`, `domains: ["*"]`, "cluster: svc-cluster", fmt.Sprintf("cluster: %q", cluster)).Replace(routeYAML),
		strings.NewReplacer("name: svc-cluster", fmt.Sprintf("name: %q", cluster), "service_name: svc-cluster", fmt.Sprintf("service_name: %q", eds)).Replace(clusterYAML),
		strings.Replace(endpointsYAML(port), "cluster_name: svc-cluster", fmt.Sprintf("cluster_name: %q", eds), 1),
	}, "---\n")
}

// federatedBootstrap is grpc-go's bootstrap for a federating client
// (gRFC A47): a default server, and the authorities a and b, each with
// its own server and listener name template.
func federatedBootstrap(id string, servers map[string]string, def string) []byte {
	server := func(addr string) []any {
		return []any{map[string]any{"server_uri": addr, "channel_creds": []any{map[string]any{"type": "insecure"}},
			"server_features": []string{"ignore_resource_deletion"}}}
	}
	auths := map[string]any{}
	for auth, addr := range servers {
		auths[auth] = map[string]any{
			"xds_servers":                            server(addr),
			"client_listener_resource_name_template": fedName(auth, "envoy.config.listener.v3.Listener", "%s"),
		}
	}
	b, err := json.Marshal(map[string]any{
		"xds_servers": server(def),
		"node":        map[string]any{"id": id, "cluster": "c1", "locality": map[string]any{"zone": "z1"}},
		"authorities": auths,
	})
	if err != nil {
		panic(err) // maps of strings always marshal
	}
	return b
}

// TestFederation: two Legation clusters, each on its own etcd and
// serving its own authority (--authority), and grpc-go's xDS client with
// a bootstrap naming both (gRFC A47): RPCs to xds://authority-a/svc and
// xds://authority-b/svc route through each cluster's config, and a
// change in one authority reaches the client without touching the other.
// gRPC C-core's client (Debian's python3-grpcio) does the same with the
// same bootstrap.
func TestFederation(t *testing.T) {
	serving := func(auth string) envOptions {
		return envOptions{configure: func(c *replica.Config) { c.Authorities = []string{auth} }}
	}
	ea, eb := newEnvWith(t, serving("authority-a")), newEnvWith(t, serving("authority-b"))
	ea.applyAndWait(t, federatedYAML("authority-a", ea.a.port))
	revB := eb.applyAndWait(t, federatedYAML("authority-b", eb.a.port))

	r, err := xds.NewXDSResolverWithConfigForTesting(federatedBootstrap("federated-client",
		map[string]string{"authority-a": ea.node.XDSAddr(), "authority-b": eb.node.XDSAddr()}, ea.node.XDSAddr()))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(target string) *grpc.ClientConn {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	ccA, ccB := dial("xds://authority-a/svc"), dial("xds://authority-b/svc")
	waitReaches(t, ccA, ea.a.port)
	waitReaches(t, ccB, eb.a.port)
	// gRPC C-core's client, with the same bootstrap: A's backend now,
	// then the one A's change points at; B's.
	coreBoot := federatedBootstrap("federated-ccore",
		map[string]string{"authority-a": ea.node.XDSAddr(), "authority-b": eb.node.XDSAddr()}, ea.node.XDSAddr())
	coreA := startCCore(t, coreBoot, "xds://authority-a/svc", ea.a.port, ea.b.port)
	coreB := startCCore(t, coreBoot, "xds://authority-b/svc", eb.a.port)
	coreA.reached(t, ea.a.port)
	coreB.reached(t, eb.a.port)

	ea.apply(t, strings.Replace(endpointsYAML(ea.b.port), "cluster_name: svc-cluster",
		fmt.Sprintf("cluster_name: %q", fedName("authority-a", "envoy.config.endpoint.v3.ClusterLoadAssignment", "svc-cluster")), 1))
	waitReaches(t, ccA, ea.b.port)
	waitReaches(t, ccB, eb.a.port)
	coreA.reached(t, ea.b.port)
	out, _, code := eb.xdsadmin("", "history", "-o", "json")
	var history []struct{ Revisions []int64 }
	if err := json.Unmarshal([]byte(out), &history); code != 0 || err != nil || len(history) != 1 || !slices.Equal(history[0].Revisions, []int64{revB}) {
		t.Errorf("authority-b's cluster was written after its own apply at %d: %s", revB, out)
	}
}

// ccore is gRPC C-core's xDS client (testdata/ccore_client.py on
// Debian's python3-grpcio, which `make setup` installs) making RPCs to
// one target until each of its ports, in turn, answers.
type ccore struct {
	lines  chan string // "reached PORT", as the client prints them
	done   chan error
	stderr *strings.Builder
}

// startCCore starts the client on target with bootstrap, to reach ports
// in turn. C-core 1.51 gates federation behind
// GRPC_EXPERIMENTAL_XDS_FEDERATION.
func startCCore(t *testing.T, bootstrap []byte, target string, ports ...int) *ccore {
	t.Helper()
	args := []string{"testdata/ccore_client.py", target}
	for _, p := range ports {
		args = append(args, strconv.Itoa(p))
	}
	cmd := exec.Command("/usr/bin/python3", args...)
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP_CONFIG="+string(bootstrap), "GRPC_EXPERIMENTAL_XDS_FEDERATION=true")
	c := &ccore{lines: make(chan string, len(ports)), done: make(chan error, 1), stderr: new(strings.Builder)}
	cmd.Stderr = c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("gRPC C-core client (/usr/bin/python3 with python3-grpcio; make setup installs it): %v", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // it may have ended
	})
	return c
}

// reached fails t unless the client next reports reaching port.
func (c *ccore) reached(t *testing.T, port int) {
	t.Helper()
	select {
	case line := <-c.lines:
		if line != "reached "+strconv.Itoa(port) {
			t.Fatalf("gRPC C-core client: %q, want reached %d", line, port)
		}
	case err := <-c.done:
		t.Fatalf("gRPC C-core client ended (%v) before reaching port %d:\n%s", err, port, c.stderr)
	case <-time.After(testTimeout):
		t.Fatalf("gRPC C-core client did not reach port %d within %s:\n%s", port, testTimeout, c.stderr)
	}
}
