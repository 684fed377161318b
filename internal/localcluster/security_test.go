package localcluster_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/adminctl"
	"github.com/legation-io/legation/internal/localcluster"
)

// TestSecureCluster: a secure cluster (Config.Secure) comes up with one
// etcd member, two replicas and HAProxy: HAProxy marks the replicas up
// through their TLS /readyz, the replicas' rings hold both (gossip with
// the key), and the replicas' HTTP port answers /debug/ to the admin's
// certificate only. etcd refuses a client without a certificate, and
// legation-replica may not write a resource.
func TestSecureCluster(t *testing.T) {
	cfg := localcluster.DefaultConfig()
	cfg.EtcdMembers, cfg.Replicas = 1, 2
	cfg.Secure = true
	cfg.XDSNodeFlags = []string{"--shutdown-timeout", "2s", "--drain-period", "1s"}
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
	// write a resource.
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
