package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/state/etcdconn"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

const (
	// etcdTestTimeout bounds what must happen: members forming a quorum.
	etcdTestTimeout = 60 * time.Second
	// etcdShortTimeout bounds what must fail: a refused client.
	etcdShortTimeout = 2 * time.Second
)

// TestChartEtcdSecure renders the default values and runs what they
// describe: the bundled etcd's members, real etcd
// processes started with the StatefulSet's arguments and the rendered
// Secret's certificates (on 127.0.0.1 ports), refuse a client without a
// certificate and serve the replicas' (xds-node's rendered flags); the
// auth Job's xdsadmin arguments set up the least-privilege roles, after
// which the replicas' certificate may not write resources and the
// operators' may. NetworkPolicies cover every port.
func TestChartEtcdSecure(t *testing.T) {
	r, rep, _ := renderChecked(t)
	checkBundledEtcd(t, r, rep, 3)
	checkNetworkPolicies(t, r, rep)
	if len(r.jobs) != 1 {
		t.Fatalf("%d Jobs; want the bundled etcd's auth Job", len(r.jobs))
	}
	if rep.cfg.GossipKeyFile == "" {
		t.Errorf("xds-node arguments %q: no --gossip-key-file; want the generated keyring", rep.args)
	}

	ec := newEtcdCluster(t, r)
	ec.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), etcdTestTimeout)
	defer cancel()

	// The replicas' connection, from their own flags and Secret.
	replica := ec.podOptions(t, rep.dep.Spec.Template.Spec, rep.container, rep.args)
	replicaCli := etcdClient(t, replica)
	xdstest.WaitFor(t, "the bundled etcd to answer the replicas' certificate", func() (bool, string) {
		gctx, cancel := context.WithTimeout(ctx, etcdShortTimeout)
		defer cancel()
		_, err := replicaCli.Put(gctx, "/legation/resources/before-auth", "x")
		return err == nil, fmt.Sprint(err)
	})

	t.Run("a client without a certificate is refused", func(t *testing.T) {
		checkRefused(t, ec, replica.CACert)
	})

	// The auth Job, as rendered, run twice: it is idempotent.
	job := r.jobs[0]
	jc := &job.Spec.Template.Spec.Containers[0]
	if len(jc.Command) != 1 || filepath.Base(jc.Command[0]) != "xdsadmin" {
		t.Fatalf("auth Job command %q; want xdsadmin", jc.Command)
	}
	jobArgs := ec.rewrite(t, job.Spec.Template.Spec, jc, "job", jc.Args)
	for i := range 2 {
		var out, errOut bytes.Buffer
		if code := adminctl.Run(ctx, jobArgs, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("auth Job run %d: xdsadmin %q: exit %d\n%s%s", i+1, jobArgs, code, out.String(), errOut.String())
		}
		t.Logf("auth Job run %d:\n%s", i+1, out.String())
	}

	t.Run("least privilege", func(t *testing.T) {
		checkPrivileges(ctx, t, ec, replicaCli)
	})
}

// checkRefused dials every member without a client certificate: the TLS
// handshake fails, and so does an etcd client.
func checkRefused(t *testing.T, ec *etcdCluster, caFile string) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	for _, ep := range ec.clientURLs() {
		host := strings.TrimPrefix(ep, "https://")
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: etcdShortTimeout}, "tcp", host, &tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err == nil {
			// TLS 1.3: the server's refusal arrives after the client's
			// side of the handshake, at the first read.
			_ = conn.SetDeadline(time.Now().Add(etcdShortTimeout))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Errorf("%s without a client certificate: %v; want the handshake refused (certificate required)", ep, err)
		}
	}
	cli := etcdClient(t, etcdconn.Options{Endpoints: ec.clientURLs(), Security: etcdconn.Security{CACert: caFile}})
	gctx, cancel := context.WithTimeout(context.Background(), etcdShortTimeout)
	defer cancel()
	if _, err := cli.Get(gctx, "/legation/"); err == nil {
		t.Error("etcd client without a certificate: Get succeeded")
	}
}

// checkPrivileges checks the roles the auth Job set up: the replicas read
// the prefix, write status records and, for their rollout controller
// (on by default: legation-rollouts), resources, but no authorization
// rule; the admin certificate (Secret legation-etcd-admin) writes
// resources.
func checkPrivileges(ctx context.Context, t *testing.T, ec *etcdCluster, replicaCli *clientv3.Client) {
	if _, err := replicaCli.Get(ctx, "/legation/", clientv3.WithPrefix()); err != nil {
		t.Errorf("replica: read the prefix: %v", err)
	}
	if _, err := replicaCli.Put(ctx, "/legation/status/node-1", "x"); err != nil {
		t.Errorf("replica: write a status record: %v", err)
	}
	if _, err := replicaCli.Put(ctx, "/legation/rollouts/r1", "x"); err != nil {
		t.Errorf("replica, with the rollout controller on: write a rollout: %v", err)
	}
	if _, err := replicaCli.Put(ctx, "/legation/locks/apply/default/evil", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("replica: take an apply lock: %v; want permission denied", err)
	}
	if _, err := replicaCli.Put(ctx, "/legation/authz/rules/evil", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("replica: write an authorization rule: %v; want permission denied", err)
	}
	dir := filepath.Join(ec.dir, "admin")
	files := secretFiles(t, ec.r, "legation-etcd-admin", dir)
	admin := etcdClient(t, etcdconn.Options{Endpoints: ec.clientURLs(), Security: etcdconn.Security{
		CACert: files["ca.crt"], Cert: files["tls.crt"], Key: files["tls.key"]}})
	if _, err := admin.Put(ctx, "/legation/resources/cluster/default/ok", "x"); err != nil {
		t.Errorf("admin: write a resource: %v", err)
	}
	if _, err := admin.Put(ctx, "/other", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("admin: write outside the prefix: %v; want permission denied", err)
	}
	if _, err := admin.AuthDisable(ctx); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("admin: auth disable: %v; want permission denied", err)
	}
}

// etcdClient is an etcd client made as the binaries make theirs.
func etcdClient(t *testing.T, o etcdconn.Options) *clientv3.Client {
	t.Helper()
	cfg, err := o.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialTimeout = etcdShortTimeout
	cfg.Logger = zap.NewNop()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// secret is the rendered Secret name, nil if none.
func (r rendered) secret(name string) *corev1.Secret {
	for _, s := range r.secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// secretFiles writes the data of the rendered Secret name into dir, as a
// secret volume would, and returns the files by key.
func secretFiles(t *testing.T, r rendered, name, dir string) map[string]string {
	t.Helper()
	s := r.secret(name)
	if s == nil {
		t.Fatalf("no Secret %s rendered", name)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for k, v := range s.Data {
		files[k] = filepath.Join(dir, k)
		if err := os.WriteFile(files[k], v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// etcdCluster runs the rendered StatefulSet's members as processes on
// 127.0.0.1, each of its ports (client, peer, metrics) moved to a free one.
type etcdCluster struct {
	r     rendered // the chart's rendering: the Secrets
	sts   *appsv1.StatefulSet
	dir   string
	bin   string
	ports map[int32]string // the container's port number: its kind
	free  [][3]int         // by member: client, peer and metrics ports
}

var portKinds = []string{"client", "peer", "metrics"}

func newEtcdCluster(t *testing.T, r rendered) *etcdCluster {
	t.Helper()
	if len(r.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets; want the bundled etcd's", len(r.statefulSets))
	}
	ec := &etcdCluster{r: r, sts: r.statefulSets[0], dir: t.TempDir(), ports: map[int32]string{}}
	ec.bin = buildEtcd(t, ec.dir)
	for _, p := range ec.sts.Spec.Template.Spec.Containers[0].Ports {
		ec.ports[p.ContainerPort] = p.Name
	}
	// Distinct ports for every member: client, peer and metrics.
	addrs := testbase.FreeAddrs(t, 3*int(*ec.sts.Spec.Replicas))
	for i := range *ec.sts.Spec.Replicas {
		var m [3]int
		for k := range m {
			_, p, _ := net.SplitHostPort(addrs[3*int(i)+k])
			m[k], _ = strconv.Atoi(p)
		}
		ec.free = append(ec.free, m)
	}
	return ec
}

// buildEtcd builds etcd at the version go.mod pins into dir.
func buildEtcd(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "etcd")
	cmd := exec.Command("go", "build", "-o", bin, "go.etcd.io/etcd/server/v3")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build etcd: %v\n%s", err, out)
	}
	return bin
}

func (ec *etcdCluster) clientURLs() []string {
	var urls []string
	for _, m := range ec.free {
		urls = append(urls, "https://127.0.0.1:"+strconv.Itoa(m[0]))
	}
	return urls
}

// start starts every member, stopped (killed) when the test ends.
func (ec *etcdCluster) start(t *testing.T) {
	t.Helper()
	spec := ec.sts.Spec.Template.Spec
	c := &spec.Containers[0]
	for i := range ec.free {
		member := fmt.Sprintf("%s-%d", ec.sts.Name, i)
		args := ec.rewrite(t, spec, c, member, c.Args)
		cmd := exec.Command(ec.bin, args...)
		var logs testbase.LockedBuffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("etcd %s %q:\n%s", member, args, logs.String())
			}
		})
	}
}

var (
	urlRE    = regexp.MustCompile(`(https?)://([^:/,=]+):(\d+)`)
	memberRE = regexp.MustCompile(`^(.+)-(\d+)\.`)
)

// rewrite makes a pod's container arguments runnable here: $(POD_NAME) is
// pod, each mount path a directory of its own under ec.dir/pod (a secret
// volume's files written there from the rendered Secrets), and each URL
// of a member's port the free port standing for it on 127.0.0.1.
func (ec *etcdCluster) rewrite(t *testing.T, spec corev1.PodSpec, c *corev1.Container, pod string, args []string) []string {
	t.Helper()
	own := 0
	if m := regexp.MustCompile(`-(\d+)$`).FindStringSubmatch(pod); m != nil && strings.HasPrefix(pod, ec.sts.Name+"-") {
		own, _ = strconv.Atoi(m[1])
	}
	var paths []string // old, new pairs
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(ec.dir, pod, m.MountPath)
		for _, v := range spec.Volumes {
			// Secrets the chart does not render (xds-node's own TLS) are
			// not etcd's concern here.
			if v.Name == m.Name && v.Secret != nil && ec.r.secret(v.Secret.SecretName) != nil {
				secretFiles(t, ec.r, v.Secret.SecretName, dir)
			}
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m.MountPath+"/", dir+"/")
	}
	mounts := strings.NewReplacer(paths...)
	var out []string
	for _, a := range args {
		a = strings.ReplaceAll(a, "$(POD_NAME)", pod)
		a = mounts.Replace(a)
		a = urlRE.ReplaceAllStringFunc(a, func(u string) string {
			m := urlRE.FindStringSubmatch(u)
			member := own
			if mm := memberRE.FindStringSubmatch(m[2]); mm != nil {
				member, _ = strconv.Atoi(mm[2])
			}
			port, _ := strconv.Atoi(m[3])
			kind := ec.ports[int32(port)]
			k := indexOf(portKinds, kind)
			if k < 0 || member >= len(ec.free) {
				t.Fatalf("argument %q: %s is no member's client, peer or metrics port", a, u)
			}
			return fmt.Sprintf("%s://127.0.0.1:%d", m[1], ec.free[member][k])
		})
		out = append(out, a)
	}
	return out
}

func indexOf(l []string, s string) int {
	for i, v := range l {
		if v == s {
			return i
		}
	}
	return -1
}

// podOptions are the etcd connection of a pod's container from its
// arguments (parsed by xds-node's flag set), rewritten to run here.
func (ec *etcdCluster) podOptions(t *testing.T, spec corev1.PodSpec, c *corev1.Container, args []string) etcdconn.Options {
	t.Helper()
	cfg, err := parseFlags(ec.rewrite(t, spec, c, "replica", args))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.EtcdSecurity.Cert == "" || cfg.EtcdSecurity.CACert == "" {
		t.Fatalf("xds-node: etcd security %v; want a CA and a client certificate", cfg.EtcdSecurity)
	}
	return etcdconn.Options{Endpoints: cfg.EtcdEndpoints, Security: cfg.EtcdSecurity}
}

// checkNetworkPolicies checks that NetworkPolicies isolate the replicas'
// and the bundled etcd's pods and let in, on each port: xDS, HTTP and the
// probes (any source by default), gossip (TCP and UDP) from the replicas only, etcd's
// client port from the replicas and the auth Job only, its peer port from
// its members only, its metrics port.
func checkNetworkPolicies(t *testing.T, r rendered, rep chartReplica) {
	t.Helper()
	replicaPods := rep.dep.Spec.Template.Labels
	if len(r.statefulSets) != 1 || len(r.jobs) != 1 {
		t.Fatalf("%d StatefulSets, %d Jobs; want the bundled etcd and its auth Job", len(r.statefulSets), len(r.jobs))
	}
	etcdPods, jobPods := r.statefulSets[0].Spec.Template.Labels, r.jobs[0].Spec.Template.Labels
	xds, http, gossip := port(t, "--xds-addr", rep.cfg.XDSAddr), port(t, "--http-addr", rep.cfg.HTTPAddr), port(t, "--gossip-addr", rep.cfg.GossipAddr)
	probe := http // the kubelet's probes: --probe-addr's port, if set
	if rep.cfg.ProbeAddr != "" {
		probe = port(t, "--probe-addr", rep.cfg.ProbeAddr)
	}
	for _, w := range []struct {
		what  string
		pods  map[string]string
		port  int32
		proto corev1.Protocol
		from  []map[string]string // nil: any source
	}{
		{"probes", replicaPods, probe, corev1.ProtocolTCP, nil},
		{"xDS", replicaPods, xds, corev1.ProtocolTCP, nil},
		{"HTTP", replicaPods, http, corev1.ProtocolTCP, nil},
		{"gossip", replicaPods, gossip, corev1.ProtocolTCP, []map[string]string{replicaPods}},
		{"gossip", replicaPods, gossip, corev1.ProtocolUDP, []map[string]string{replicaPods}},
		{"etcd client", etcdPods, 2379, corev1.ProtocolTCP, []map[string]string{replicaPods, jobPods}},
		{"etcd peer", etcdPods, 2380, corev1.ProtocolTCP, []map[string]string{etcdPods}},
		{"etcd metrics", etcdPods, 2381, corev1.ProtocolTCP, nil},
	} {
		rules, isolated := ingressRules(r.networkPolicies, w.pods, w.port, w.proto)
		if !isolated || len(rules) == 0 {
			t.Errorf("%s port %d/%s: isolated %v, %d rules; want a NetworkPolicy selecting the pods and a rule for the port", w.what, w.port, w.proto, isolated, len(rules))
			continue
		}
		if w.from == nil {
			continue
		}
		allowed := map[int]bool{}
		for _, rule := range rules {
			if len(rule.From) == 0 {
				t.Errorf("%s port %d/%s: a rule lets in any source; want only %v", w.what, w.port, w.proto, w.from)
			}
			for _, peer := range rule.From {
				i := peerIndex(peer, w.from)
				if i < 0 {
					t.Errorf("%s port %d/%s: peer %+v lets in more than %v", w.what, w.port, w.proto, peer, w.from)
				}
				allowed[i] = true
			}
		}
		for i, pods := range w.from {
			if !allowed[i] {
				t.Errorf("%s port %d/%s: pods %v not let in", w.what, w.port, w.proto, pods)
			}
		}
	}
}

// ingressRules are the ingress rules of the policies selecting pods that
// cover port; isolated reports whether any such policy isolates them.
func ingressRules(nps []*networkingv1.NetworkPolicy, pods map[string]string, port int32, proto corev1.Protocol) (rules []networkingv1.NetworkPolicyIngressRule, isolated bool) {
	for _, np := range nps {
		if !matches(np.Spec.PodSelector.MatchLabels, pods) || len(np.Spec.PodSelector.MatchExpressions) != 0 {
			continue
		}
		for _, pt := range np.Spec.PolicyTypes {
			isolated = isolated || pt == networkingv1.PolicyTypeIngress
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				pp := corev1.ProtocolTCP
				if p.Protocol != nil {
					pp = *p.Protocol
				}
				if p.Port != nil && p.Port.IntValue() == int(port) && pp == proto {
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules, isolated
}

// peerIndex is the index of the pod labels in want that peer selects,
// alone (a pod selector in the policy's namespace, matching those pods
// and no other of want); -1 if none.
func peerIndex(peer networkingv1.NetworkPolicyPeer, want []map[string]string) int {
	if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil || len(peer.PodSelector.MatchExpressions) != 0 {
		return -1
	}
	found := -1
	for i, pods := range want {
		if matches(peer.PodSelector.MatchLabels, pods) {
			if found >= 0 {
				return -1
			}
			found = i
		}
	}
	return found
}
