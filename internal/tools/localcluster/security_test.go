package localcluster_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// TestSecureCluster: a secure cluster (Config.Secure) comes up with one
// etcd member, two replicas and HAProxy: HAProxy marks the replicas up
// through their TLS /readyz, the replicas' rings hold both (gossip with
// the key), and the replicas' HTTP port answers /debug/ to the admin's
// certificate only. etcd refuses a client without a certificate, and
// legation-replica may not write a resource, but writes its load windows:
// a report on an LRS stream over mTLS shows in xdsadmin load.
func TestSecureCluster(t *testing.T) {
	cfg := localcluster.DefaultConfig()
	cfg.EtcdMembers, cfg.Replicas = 1, 2
	cfg.Secure = true
	cfg.XDSNodeFlags = []string{"--shutdown-timeout", "2s", "--drain-period", "1s", "--lrs-interval", "1s"}
	c := localcluster.StartForTest(t, cfg)
	c.WaitRing()
	sec := c.Security()
	if sec == nil {
		t.Fatal("Security() is nil in a secure cluster")
	}
	for _, ep := range c.EtcdEndpoints {
		if !strings.HasPrefix(ep, "https://") {
			t.Errorf("etcd endpoint %q, want https://", ep)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := c.Replicas()[0]
	if code, body, err := c.Cluster().HTTPGet(ctx, r.HTTPAddr, "/debug/cluster"); err != nil || code != http.StatusOK {
		t.Errorf("/debug/cluster as the admin: %d %v %.200s, want 200", code, err, body)
	}
	client, err := sec.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*tls.Config{"the client": client, "no certificate": mustTLS(t, sec, localcluster.CertFiles{})} {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg}, Timeout: 5 * time.Second}
		resp, err := hc.Get("https://" + r.HTTPAddr + "/debug/cluster")
		if err != nil {
			t.Errorf("/debug/cluster as %s: %v", name, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("/debug/cluster as %s: %d, want 401 or 403", name, resp.StatusCode)
		}
	}
	// Go's TLS server answers plain HTTP with a 400.
	if code, _, err := plainGet("http://" + r.HTTPAddr + "/readyz"); err == nil && code == http.StatusOK {
		t.Errorf("/readyz over plain HTTP: 200, want the replica to serve TLS only")
	}

	// etcd: no certificate, no answer; legation-replica reads but may not
	// apply (it may not take a scope's apply lock: its rollout
	// controller writes resources, but only in a rollout's steps).
	if code, out, _ := admin(c, []string{"--etcd-cacert", sec.CAFile}, "--dial-timeout", "1s", "--timeout", "2s", "get", "cluster"); code == 0 {
		t.Errorf("xdsadmin without an etcd client certificate: exit 0\n%s", out)
	}
	replica := []string{"--etcd-cacert", sec.CAFile, "--etcd-cert", sec.EtcdReplica.CertFile, "--etcd-key", sec.EtcdReplica.KeyFile}
	if code, _, errOut := admin(c, replica, "apply", "-f", "-"); code == 0 || !strings.Contains(errOut, "permission denied") {
		t.Errorf("xdsadmin apply as legation-replica: exit %d %q, want permission denied", code, errOut)
	}
	if code, out, errOut := admin(c, sec.XDSAdminArgs(), "authz", "list"); code != 0 ||
		!strings.Contains(out, localcluster.AdminIdentity) || !strings.Contains(out, localcluster.ClientIdentity) {
		t.Errorf("xdsadmin authz list as legation-admin: exit %d\n%s%s\nwant the admin and client rules", code, out, errOut)
	}
	checkLoadWritten(t, c, client)
}

// checkLoadWritten sends one load report for cluster c1 on an LRS stream
// to the first replica, over mTLS with tlsCfg, and waits until xdsadmin
// load shows it: the replica's etcd role may write its load windows.
func checkLoadWritten(t *testing.T, c *localcluster.TestCluster, tlsCfg *tls.Config) {
	t.Helper()
	sec := c.Security()
	if code, out, errOut := admin(c, sec.XDSAdminArgs(), "apply", "-f", "-"); code != 0 {
		t.Fatalf("xdsadmin apply of cluster c1: exit %d\n%s%s", code, out, errOut)
	}
	cc, err := grpc.NewClient(c.Replicas()[0].XDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, err := loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: "lrs-secure", Cluster: "g"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("LRS first response: %v", err)
	}
	// The view may not hold c1 yet: the report is sent until it counts.
	for {
		err := st.Send(&loadv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{
			ClusterName: "c1", LoadReportInterval: durationpb.New(time.Second),
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{Locality: &corev3.Locality{Zone: "z"}, TotalIssuedRequests: 1, TotalSuccessfulRequests: 1}},
		}}})
		if err != nil {
			t.Fatalf("LRS report: %v", err)
		}
		code, out, errOut := admin(c, sec.XDSAdminArgs(), "load", "c1", "--windows", "100")
		if code == 0 && strings.Contains(out, "c1 ") {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("xdsadmin load never showed c1's report: exit %d\n%s%s", code, out, errOut)
		}
		time.Sleep(200 * time.Millisecond) // paces the reports
	}
}

func mustTLS(t *testing.T, sec *localcluster.Security, f localcluster.CertFiles) *tls.Config {
	t.Helper()
	cfg, err := sec.TLS(f)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// admin runs xdsadmin against c's etcd with conn's flags (after
// --etcd-endpoints) and a cluster on standard input.
func admin(c *localcluster.TestCluster, conn []string, args ...string) (int, string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errOut strings.Builder
	all := append(append([]string{"--etcd-endpoints", strings.Join(c.EtcdEndpoints, ",")}, conn...), args...)
	code := adminctl.Run(ctx, all, strings.NewReader(clusterYAML("c1", "1s")), &out, &errOut)
	return code, out.String(), errOut.String()
}

func plainGet(url string) (int, string, error) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
