package etcdconn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/etcdconn"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/testcerts"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

const (
	// defaultTestTimeout bounds what must happen.
	defaultTestTimeout = 20 * time.Second
	// defaultTestShortTimeout bounds what must fail: a refused client.
	defaultTestShortTimeout = 2 * time.Second

	prefix = "/legation/"
)

// setUpRBAC is docs/operations/etcd.md's least privilege, done with
// clientv3's Auth API: the two roles on prefix (localcluster.AddRoles, as
// a secure local cluster has them), a user per certificate CN
// (no password: etcd's --client-cert-auth names them), a user with a
// password, and root; then auth enabled.
func setUpRBAC(ctx context.Context, t *testing.T, root *clientv3.Client, prefix string) {
	t.Helper()
	must := func(what string, _ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if err := localcluster.AddRoles(ctx, root, prefix); err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct{ name, role string }{{"replica-1", localcluster.RoleReplica}, {"xdsadmin", localcluster.RoleAdmin}} {
		a, err := root.UserAddWithOptions(ctx, u.name, "", &clientv3.UserAddOptions{NoPassword: true})
		must("user "+u.name, a, err)
		gr, err := root.UserGrantRole(ctx, u.name, u.role)
		must("grant "+u.role+" to "+u.name, gr, err)
	}
	a, err := root.UserAdd(ctx, "alice", "alice-secret")
	must("user alice", a, err)
	gr, err := root.UserGrantRole(ctx, "alice", "legation-admin")
	must("grant legation-admin to alice", gr, err)
	a, err = root.UserAdd(ctx, "root", "root-secret")
	must("user root", a, err)
	gr, err = root.UserGrantRole(ctx, "root", "root")
	must("grant root to root", gr, err)
	e, err := root.AuthEnable(ctx)
	must("auth enable", e, err)
}

// client is an etcd client made as the binaries make theirs.
func client(t *testing.T, o etcdconn.Options) *clientv3.Client {
	t.Helper()
	cfg, err := o.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialTimeout = defaultTestShortTimeout
	cfg.Logger = zap.NewNop()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// xdsadmin runs xdsadmin in-process, as adminctl's tests do, with args
// after the connection flags.
func xdsadmin(t *testing.T, stdin string, conn []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code = adminctl.Run(ctx, append(append([]string{"--etcd-prefix", prefix, "--dial-timeout", "5s"}, conn...), args...),
		strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func clusterYAML(name string) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: %s
type: EDS
eds_cluster_config:
  eds_config:
    ads: {}
    resource_api_version: V3
  service_name: %s
connect_timeout: 1s
`, name, name)
}

// TestRBAC runs a real etcd process with TLS, client certificate
// authentication and auth enabled with the two roles of docs/operations/etcd.md, and shows
// that each binary's code works with the least privilege it is given and
// no more.
func TestRBAC(t *testing.T) {
	// Not parallel: xdsadmin reads LEGATION_ETCD_PASSWORD from the
	// process's environment (t.Setenv).
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, o testcerts.Options) *testcerts.Cert {
		t.Helper()
		c, err := ca.Issue(dir, name, o)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	cfg := localcluster.DefaultConfig()
	cfg.EtcdMembers, cfg.Replicas, cfg.HAProxy = 1, 0, false
	cfg.Grace = 5 * time.Second
	cfg = localcluster.ConfigForTest(t, cfg)
	host := strings.Split(localcluster.EtcdAddr(cfg.Net, 1), ":")[0]
	serverCert := issue("server", testcerts.Options{CommonName: "etcd-1", DNSNames: []string{"localhost"}, IPs: ipsOf(t, host)})
	cfg.EtcdTLS = &localcluster.EtcdTLS{CertFile: serverCert.CertFile, KeyFile: serverCert.KeyFile, TrustedCAFile: ca.CertFile, ClientCertAuth: true}
	c, err := localcluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("localcluster: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := c.Up(ctx); err != nil {
		t.Fatal(err)
	}
	endpoint := c.Status().EtcdEndpoints[0]
	if !strings.HasPrefix(endpoint, "https://") {
		t.Fatalf("endpoint %q, want https://", endpoint)
	}

	certOf := func(cn string) *testcerts.Cert { return issue(cn, testcerts.Options{CommonName: cn}) }
	rootCert, replicaCert, adminCert, nobodyCert := certOf("root"), certOf("replica-1"), certOf("xdsadmin"), certOf("nobody")
	opts := func(cert *testcerts.Cert) etcdconn.Options {
		o := etcdconn.Options{Endpoints: []string{endpoint}, Security: etcdconn.Security{CACert: ca.CertFile}}
		if cert != nil {
			o.Cert, o.Key = cert.CertFile, cert.KeyFile
		}
		return o
	}
	setUpRBAC(ctx, t, client(t, opts(rootCert)), prefix)

	// The replica: xds-node's own code (replica.New, Run) with its
	// certificate, in etcd mode, registered in the membership registry.
	var logs testbase.LockedBuffer
	ncfg := replica.DefaultConfig()
	ncfg.EtcdEndpoints = []string{endpoint}
	ncfg.EtcdSecurity = opts(replicaCert).Security
	ncfg.Name = "replica-1"
	ncfg.XDSAddr, ncfg.HTTPAddr, ncfg.GossipAddr, ncfg.AdvertiseAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1"
	ncfg.ShutdownTimeout = 0
	ncfg.LRSInterval = time.Second // load windows written each second
	// The test reads /debug/view over plaintext HTTP from loopback.
	ncfg.InsecureLoopbackDebug = true
	ncfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n, err := replica.New(ncfg)
	if err != nil {
		t.Fatal(err)
	}
	nctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- n.Run(nctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("node.Run: %v", err)
		}
		if t.Failed() {
			t.Logf("replica's logs:\n%s", logs.String())
		}
	})
	admin := client(t, opts(adminCert))
	xdstest.WaitFor(t, "the replica's registration under members/", func() (bool, string) {
		resp, err := admin.Get(ctx, shard.RegistryKey(prefix, "replica-1"))
		if err != nil {
			return false, err.Error()
		}
		return len(resp.Kvs) == 1, "no key"
	})
	xdstest.WaitFor(t, "the replica ready", func() (bool, string) {
		code, body := get(t, "http://"+n.HTTPAddr()+"/readyz")
		return code == http.StatusOK, body
	})

	conn := func(cert *testcerts.Cert) []string {
		args := []string{"--etcd-endpoints", endpoint, "--etcd-cacert", ca.CertFile}
		if cert != nil {
			args = append(args, "--etcd-cert", cert.CertFile, "--etcd-key", cert.KeyFile)
		}
		return args
	}

	t.Run("xdsadmin applies by certificate CN", func(t *testing.T) {
		code, out, errOut := xdsadmin(t, clusterYAML("by-cert"), conn(adminCert), "apply", "-f", "-", "--ttl", "60s")
		if code != 0 {
			t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
		}
		// The replica reads it: its view (through its certificate) has it.
		xdstest.WaitFor(t, "the replica's view to hold the cluster", func() (bool, string) {
			code, body := get(t, "http://"+n.HTTPAddr()+"/debug/view")
			var v struct {
				Types map[string]int `json:"types"`
			}
			if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
				return false, body
			}
			return v.Types["cluster"] >= 1, body
		})
		// A TTL'd resource's lease: granted and kept alive by the admin.
		if code, out, errOut := xdsadmin(t, "", conn(adminCert), "ttl", "refresh", "cluster", "by-cert"); code != 0 {
			t.Fatalf("ttl refresh: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("xdsadmin applies by username and password", func(t *testing.T) {
		// The certificate's CN has no etcd user: the token's user acts.
		t.Setenv(etcdconn.PasswordEnv, "alice-secret")
		args := append(conn(nobodyCert), "--etcd-username", "alice")
		code, out, errOut := xdsadmin(t, clusterYAML("by-password"), args, "apply", "-f", "-")
		if code != 0 {
			t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
		}
		t.Setenv(etcdconn.PasswordEnv, "wrong")
		code, out, errOut = xdsadmin(t, "", args, "get", "cluster")
		if code == 0 || !strings.Contains(errOut, "authentication failed") || strings.Contains(out+errOut, "wrong") {
			t.Fatalf("get with a wrong password: exit %d, want an authentication error without the password\n%s%s", code, out, errOut)
		}
	})

	t.Run("the replica's status records", func(t *testing.T) {
		// An xDS client on the replica: its status writer writes the
		// node's record under status/ with the replica's certificate.
		cc := xdstest.Dial(t, n.XDSAddr())
		sctx, cancel := context.WithTimeout(ctx, defaultTestTimeout)
		defer cancel()
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("envoy-1", "default"), TypeUrl: resource.Cluster.URL}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		xdstest.WaitFor(t, "envoy-1's status record", func() (bool, string) {
			ns, err := status.Get(ctx, admin, prefix, "envoy-1")
			if err != nil {
				return false, err.Error()
			}
			return ns.Home == "replica-1", ns.Home
		})
	})

	t.Run("the replica's load windows", func(t *testing.T) {
		// A load report on an LRS stream: the replica writes its window
		// under load/ with its certificate.
		cc := xdstest.Dial(t, n.XDSAddr())
		sctx, cancel := context.WithTimeout(ctx, defaultTestTimeout)
		defer cancel()
		st, err := loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&loadv3.LoadStatsRequest{Node: xdstest.Node("envoy-lrs", "default")}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&loadv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{
			ClusterName: "by-cert", LoadReportInterval: durationpb.New(time.Second),
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalIssuedRequests: 3, TotalSuccessfulRequests: 3}},
		}}}); err != nil {
			t.Fatal(err)
		}
		xdstest.WaitFor(t, "replica-1's load window with the report", func() (bool, string) {
			ws, bad, err := lrs.Read(ctx, admin, prefix)
			if err != nil || len(bad) > 0 {
				return false, fmt.Sprintf("%v %v", err, bad)
			}
			sums := lrs.Summarize(ws, "by-cert", lrs.ByCluster, 0, time.Now())
			return len(sums) == 1 && sums[0].Issued == 3 && slices.Equal(sums[0].Replicas, []string{"replica-1"}), fmt.Sprintf("%+v", sums)
		})
	})

	t.Run("the replica's credentials cannot write a resource", func(t *testing.T) {
		replica := client(t, opts(replicaCert))
		_, err := replica.Put(ctx, prefix+"resources/cluster/default/evil", "x")
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("put as replica-1: %v, want %v", err, rpctypes.ErrPermissionDenied)
		}
		// Nor outside its prefix, nor read there.
		if _, err := replica.Get(ctx, "/other/"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("get outside the prefix as replica-1: %v, want %v", err, rpctypes.ErrPermissionDenied)
		}
		code, out, errOut := xdsadmin(t, clusterYAML("evil"), conn(replicaCert), "apply", "-f", "-")
		if code == 0 || !strings.Contains(errOut, "permission denied") {
			t.Fatalf("xdsadmin apply as replica-1: exit %d, want a permission error\n%s%s", code, out, errOut)
		}
	})

	t.Run("a client without a certificate is refused", func(t *testing.T) {
		cli := client(t, opts(nil))
		gctx, cancel := context.WithTimeout(ctx, defaultTestShortTimeout)
		defer cancel()
		if _, err := cli.Get(gctx, prefix); err == nil {
			t.Fatal("get without a client certificate succeeded")
		}
		code, out, errOut := xdsadmin(t, "", append(conn(nil), "--dial-timeout", "1s"), "get", "cluster")
		if code == 0 {
			t.Fatalf("xdsadmin without a certificate: exit 0\n%s", out)
		}
		t.Logf("refused: %s", strings.TrimSpace(errOut))
	})

	t.Run("bad flags give clear errors", func(t *testing.T) {
		code, _, errOut := xdsadmin(t, "", []string{"--etcd-endpoints", strings.Replace(endpoint, "https", "http", 1),
			"--etcd-cacert", ca.CertFile}, "get", "cluster")
		want := "--etcd-cacert (TLS) with --etcd-endpoints"
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("xdsadmin with TLS flags and http://: exit %d, %s; want %q", code, errOut, want)
		}
		bad := ncfg
		bad.Logger = nil
		bad.EtcdSecurity.Key = adminCert.KeyFile
		_, err := replica.New(bad)
		want = "--etcd-key " + adminCert.KeyFile + " is not the key of --etcd-cert " + replicaCert.CertFile
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("replica.New with another's key: %v; want %q", err, want)
		}
	})
}

// ipsOf parses an IP address for a certificate.
func ipsOf(t *testing.T, host string) []net.IP {
	t.Helper()
	ip := net.ParseIP(host)
	if ip == nil {
		t.Fatalf("%q is not an IP address", host)
	}
	return []net.IP{ip}
}

// get GETs url, returning the status code and body ("" and 0 on error).
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestShortTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
