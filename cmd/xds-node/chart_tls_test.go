package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/security/tlsfiles"
)

// The chart's secure defaults: mTLS with certificates issued from its own
// CA, the bundled etcd over TLS with its roles, a gossip key, and the
// image `make image` builds; and the lab file that turns TLS off.

// replicaID is the SPIFFE ID the chart's CA issues the default release's
// replicas.
const replicaID = "spiffe://cluster.local/ns/legation/legation/replica"

// makeImage is the image `make image` builds (hack/image.sh --print).
func makeImage(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("./hack/image.sh", "--print")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "IMAGE_REPOSITORY=", "VERSION=", "IMAGE=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/image.sh --print: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestChartSecureDefault renders the default values, as a plain `helm
// install` does, and checks what they promise: every container of the
// chart's runs the image `make image` builds; the replicas serve mTLS with
// certificates their init container issues from the chart's CA, which
// run here give a SPIFFE identity that replicas and an Envoy (its
// certificate issued as NOTES says) accept at a real handshake; the
// bundled etcd is over TLS with its roles Job; gossip is encrypted.
func TestChartSecureDefault(t *testing.T) {
	r, rep, _ := renderChecked(t)
	checkBundledEtcd(t, r, rep, 3)
	image := makeImage(t)
	for _, c := range append(append([]corev1.Container{}, rep.dep.Spec.Template.Spec.InitContainers...), rep.dep.Spec.Template.Spec.Containers...) {
		if c.Image != image {
			t.Errorf("container %s: image %q; want %q, what `make image` builds", c.Name, c.Image, image)
		}
	}
	if len(r.jobs) != 1 || r.jobs[0].Spec.Template.Spec.Containers[0].Image != image {
		t.Fatalf("want the etcd auth Job, on image %q", image)
	}
	// The roles of a new version are in place before its replicas start.
	if hook := r.jobs[0].Annotations["helm.sh/hook"]; hook != "post-install,pre-upgrade" {
		t.Errorf("etcd auth Job: hook %q; want post-install,pre-upgrade", hook)
	}
	cfg := rep.cfg
	if !cfg.MTLS() || cfg.GossipKeyFile == "" || cfg.EtcdSecurity.Cert == "" {
		t.Errorf("TLS %q %q %q, gossip key %q, etcd client certificate %q: want them all", cfg.TLSCertFile, cfg.TLSKeyFile,
			cfg.ClientCAFile, cfg.GossipKeyFile, cfg.EtcdSecurity.Cert)
	}
	ca := r.secret("legation-ca")
	if ca == nil || ca.Type != corev1.SecretTypeTLS || len(ca.Data["tls.crt"]) == 0 || len(ca.Data["tls.key"]) == 0 {
		t.Fatalf("Secret legation-ca: %v; want a kubernetes.io/tls Secret with the CA's tls.crt and tls.key", ca)
	}

	// Two pods start: each init container issues its replica's files.
	dir := t.TempDir()
	a := startPod(t, r, rep, filepath.Join(dir, "a"), "10.1.2.3")
	b := startPod(t, r, rep, filepath.Join(dir, "b"), "10.1.2.4")
	cert := a.Certificate()
	if id, err := tlsfiles.Identity(cert); err != nil || id != replicaID {
		t.Errorf("replica certificate identity %q, %v; want %s", id, err, replicaID)
	}
	if !slices.Contains(cert.DNSNames, "legation-xds.legation.svc") || !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.String() == "10.1.2.3" }) {
		t.Errorf("replica certificate: DNS %q, IPs %v; want the xDS Service's name and the pod's IP", cert.DNSNames, cert.IPAddresses)
	}

	// An Envoy's certificate from the CA's Secret, as NOTES says.
	files := secretFiles(t, r, "legation-ca", filepath.Join(dir, "ca"))
	envoyDir := filepath.Join(dir, "envoy-tls")
	var out, errOut bytes.Buffer
	if code := adminctl.Run(context.Background(), []string{"cert", "issue", "--ca-cert", files["tls.crt"], "--ca-key", files["tls.key"],
		"--spiffe-id", "spiffe://cluster.local/ns/edge/envoy", "--out-dir", envoyDir}, nil, &out, &errOut); code != 0 {
		t.Fatalf("xdsadmin cert issue: exit %d: %s", code, errOut.String())
	}
	envoy, err := tlsfiles.New(tlsfiles.Config{CertFile: filepath.Join(envoyDir, "tls.crt"), KeyFile: filepath.Join(envoyDir, "tls.key"),
		CAFile: filepath.Join(envoyDir, "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}

	// Replica a serves mTLS; replica b (relaying) and the Envoy get in.
	for _, c := range []struct {
		name  string
		files *tlsfiles.Files
		want  string
	}{{"replica b", b, replicaID}, {"envoy", envoy, "spiffe://cluster.local/ns/edge/envoy"}} {
		if got, err := handshake(t, a, c.files); err != nil || got != c.want {
			t.Errorf("%s's handshake with replica a: identity %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

// startPod runs, in dir, the xds-node pod's init container as rendered
// (xdsadmin in-process, the Secrets it mounts written as files) and
// returns the TLS files xds-node's rendered flags then name, loaded as
// xds-node loads them.
func startPod(t *testing.T, r rendered, rep chartReplica, dir, podIP string) *tlsfiles.Files {
	t.Helper()
	spec := rep.dep.Spec.Template.Spec
	vols := podVolumes(t, r, spec, dir)
	vars := map[string]string{"POD_IP": podIP, "POD_NAME": "legation-x"}
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "issue-cert" {
		t.Fatalf("init containers %v; want issue-cert", spec.InitContainers)
	}
	ic := &spec.InitContainers[0]
	if len(ic.Command) != 1 || filepath.Base(ic.Command[0]) != "xdsadmin" {
		t.Fatalf("init container command %q; want xdsadmin", ic.Command)
	}
	var out, errOut bytes.Buffer
	args := containerArgs(t, ic, ic.Args, vols, vars)
	if code := adminctl.Run(context.Background(), args, nil, &out, &errOut); code != 0 {
		t.Fatalf("init container: xdsadmin %q: exit %d: %s", args, code, errOut.String())
	}
	cfg, err := parseFlags(containerArgs(t, rep.container, rep.args, vols, vars))
	if err != nil {
		t.Fatal(err)
	}
	files, err := tlsfiles.New(tlsfiles.Config{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.ClientCAFile})
	if err != nil {
		t.Fatalf("xds-node's TLS files: %v", err)
	}
	return files
}

// podVolumes makes a directory under dir for each volume of spec, a
// Secret's holding the rendered Secret's files (Secrets the chart does not
// render stay empty), and returns them by volume name.
func podVolumes(t *testing.T, r rendered, spec corev1.PodSpec, dir string) map[string]string {
	t.Helper()
	vols := map[string]string{}
	for _, v := range spec.Volumes {
		d := filepath.Join(dir, v.Name)
		if v.Secret != nil && r.secret(v.Secret.SecretName) != nil {
			secretFiles(t, r, v.Secret.SecretName, d)
		} else if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		vols[v.Name] = d
	}
	return vols
}

// containerArgs are args of c with each mount path (a directory of its
// own, or a file in it) replaced by its volume's directory and each
// $(VAR) by its value. An argument still naming a file under /etc, where
// the chart mounts its volumes, fails the test: it would reach this
// machine's files.
func containerArgs(t *testing.T, c *corev1.Container, args []string, vols, vars map[string]string) []string {
	t.Helper()
	var out []string
	for _, a := range args {
		a = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := vars[envRef.FindStringSubmatch(ref)[1]]
			if !ok {
				t.Errorf("argument %q: no value for %s", a, ref)
			}
			return v
		})
		for _, m := range c.VolumeMounts {
			d, ok := vols[m.Name]
			if !ok {
				t.Fatalf("container %s mounts %s, which is no volume", c.Name, m.Name)
			}
			a = strings.ReplaceAll(a, m.MountPath+"/", d+"/")
			if rest, ok := strings.CutSuffix(a, m.MountPath); ok && (rest == "" || strings.HasSuffix(rest, "=")) {
				a = rest + d
			}
		}
		if strings.HasPrefix(a, "/etc/") || strings.Contains(a, "=/etc/") {
			t.Fatalf("argument %q of container %s names a file under /etc: a mount path left as it is", a, c.Name)
		}
		out = append(out, a)
	}
	return out
}

// handshake makes a TLS connection on 127.0.0.1 from client to server, the
// server requiring a client certificate as xds-node's xDS port does, and
// returns the identity the server read.
func handshake(t *testing.T, server, client *tlsfiles.Files) (string, error) {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", server.ServerConfig(tls.RequireAndVerifyClientCert))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		id  string
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(etcdTestTimeout))
		if err := tc.Handshake(); err != nil {
			got <- result{err: err}
			return
		}
		id, _ := tlsfiles.PeerIdentity(tc.ConnectionState())
		got <- result{id: id}
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: etcdTestTimeout}, "tcp", l.Addr().String(), client.ClientConfig(nil))
	if err != nil {
		return "", err
	}
	defer c.Close()
	res := <-got
	return res.id, res.err
}

// TestChartLab renders the lab values file: TLS off on the replicas and
// the bundled etcd, no CA and no roles Job, gossip still encrypted.
func TestChartLab(t *testing.T) {
	r, rep, _ := renderChecked(t, "-f", labValues)
	cfg := rep.cfg
	if cfg.TLSCertFile != "" || cfg.ClientCAFile != "" || cfg.EtcdSecurity.Cert != "" || cfg.GossipKeyFile == "" {
		t.Errorf("TLS %q %q, etcd client certificate %q, gossip key %q: want no TLS, a gossip key", cfg.TLSCertFile, cfg.ClientCAFile,
			cfg.EtcdSecurity.Cert, cfg.GossipKeyFile)
	}
	for _, ep := range cfg.EtcdEndpoints {
		if !strings.HasPrefix(ep, "http://") {
			t.Errorf("--etcd-endpoints %q: want the bundled etcd over http://", cfg.EtcdEndpoints)
		}
	}
	if n := len(rep.dep.Spec.Template.Spec.InitContainers); n != 0 || len(r.jobs) != 0 {
		t.Errorf("%d init containers, %d Jobs: want neither", n, len(r.jobs))
	}
	for _, s := range r.secrets {
		if s.Name != "legation-gossip-key" {
			t.Errorf("Secret %s rendered; want only the gossip key", s.Name)
		}
	}
	args := r.statefulSets[0].Spec.Template.Spec.Containers[0].Args
	if slices.Contains(args, "--client-cert-auth=true") {
		t.Errorf("bundled etcd args %q: client certificates with insecure", args)
	}
}
