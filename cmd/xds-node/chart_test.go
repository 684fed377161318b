package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/replica"
)

// The chart, and how `make manifests` renders it into manifestsFile, with
// manifestsValues over the defaults: keep these in step with the Makefile.
const (
	chartDir        = "deploy/helm/legation"
	manifestsFile   = "deploy/kubernetes/legation.yaml"
	manifestsValues = "deploy/kubernetes/values.yaml"
	chartRelease    = "legation"
	chartNamespace  = "legation"
)

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, chartDir, "Chart.yaml")); err != nil {
		t.Fatalf("no chart at %s: %v", filepath.Join(root, chartDir), err)
	}
	return root
}

// helmTemplate renders the chart with helm, pinned in hack/tools/go.mod,
// as `make manifests` does, with more helm arguments (--set ...) after.
func helmTemplate(t *testing.T, extra ...string) ([]byte, error) {
	t.Helper()
	args := append([]string{"tool", "-modfile=hack/tools/go.mod", "helm", "template", chartRelease, chartDir,
		"--namespace", chartNamespace}, extra...)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot(t)
	// helm's own directories, out of the user's.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// rendered is a chart's objects, decoded strictly by kind.
type rendered struct {
	deployments     []*appsv1.Deployment
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	pdbs            []*policyv1.PodDisruptionBudget
	secrets         []*corev1.Secret
	jobs            []*batchv1.Job
	networkPolicies []*networkingv1.NetworkPolicy
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeManifests decodes every YAML document of out as the Kubernetes
// API type of its apiVersion and kind, strictly: an unknown field, a
// wrong type or an unknown kind is an error.
func decodeManifests(t *testing.T, out []byte) rendered {
	t.Helper()
	var r rendered
	seen := map[string]bool{}
	for i, doc := range docSep.Split(string(out), -1) {
		if !hasContent(doc) {
			continue
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Errorf("document %d: %v\n%s", i, err, doc)
			continue
		}
		id := fmt.Sprintf("%s %s/%s", tm.Kind, tm.Metadata.Namespace, tm.Metadata.Name)
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			r.deployments, obj = append(r.deployments, d), d
		case "apps/v1 StatefulSet":
			s := &appsv1.StatefulSet{}
			r.statefulSets, obj = append(r.statefulSets, s), s
		case "v1 Service":
			s := &corev1.Service{}
			r.services, obj = append(r.services, s), s
		case "policy/v1 PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			r.pdbs, obj = append(r.pdbs, p), p
		case "v1 Secret":
			s := &corev1.Secret{}
			r.secrets, obj = append(r.secrets, s), s
		case "batch/v1 Job":
			j := &batchv1.Job{}
			r.jobs, obj = append(r.jobs, j), j
		case "networking.k8s.io/v1 NetworkPolicy":
			p := &networkingv1.NetworkPolicy{}
			r.networkPolicies, obj = append(r.networkPolicies, p), p
		default:
			t.Errorf("%s: apiVersion %q kind %q: not a kind the chart should render", id, tm.APIVersion, tm.Kind)
			continue
		}
		if err := strictDecode([]byte(doc), obj); err != nil {
			t.Errorf("%s: not a valid %s: %v", id, tm.Kind, err)
		}
		if tm.Metadata.Name == "" || tm.Metadata.Namespace != chartNamespace {
			t.Errorf("%s: want a name and namespace %q", id, chartNamespace)
		}
		if seen[id] {
			t.Errorf("%s: rendered twice", id)
		}
		seen[id] = true
	}
	return r
}

// strictDecode decodes a YAML document into obj as the API server's
// strict field validation does: field names match case-sensitively (so
// clusterIp is not clusterIP, as encoding/json would have it), and an
// unknown or duplicate field is an error.
func strictDecode(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strictErrs, err := sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	return errors.Join(append([]error{err}, strictErrs...)...)
}

// hasContent reports whether a YAML document has more than comments.
func hasContent(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return true
		}
	}
	return false
}

// matches reports whether selector picks pods labelled labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// chartReplica is the xds-node Deployment, its container, and the Config its
// arguments parse to.
type chartReplica struct {
	dep       *appsv1.Deployment
	container *corev1.Container
	args      []string
	cfg       replica.Config
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkReplica finds the xds-node container and parses its arguments with
// xds-node's own flag set and checks (parseFlags), after expanding the
// $(VAR) references Kubernetes expands, from sample downward API values.
func checkReplica(t *testing.T, r rendered) chartReplica {
	t.Helper()
	var rep chartReplica
	for _, d := range r.deployments {
		for i := range d.Spec.Template.Spec.Containers {
			if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "xds-node" {
				if rep.container != nil {
					t.Fatalf("two xds-node containers: in %s and %s", rep.dep.Name, d.Name)
				}
				rep.dep, rep.container = d, c
			}
		}
	}
	if rep.container == nil {
		t.Fatal("no Deployment with a container named xds-node")
	}
	c := rep.container
	if !matches(rep.dep.Spec.Selector.MatchLabels, rep.dep.Spec.Template.Labels) {
		t.Errorf("Deployment %s: selector %v does not match its pods' labels %v", rep.dep.Name, rep.dep.Spec.Selector.MatchLabels, rep.dep.Spec.Template.Labels)
	}
	if len(c.Command) != 0 {
		t.Errorf("xds-node container: command %q overrides the image's entrypoint", c.Command)
	}

	// The values of $(VAR): downward API fields get samples; a Secret's
	// LEGATION_* variable is set in the environment parseFlags reads.
	sample := map[string]string{"metadata.name": "legation-5d8c7-x2x9q", "status.podIP": "10.1.2.3"}
	vars := map[string]string{}
	fs := xdsNodeFlags()
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v, ok := sample[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Errorf("env %s: no sample value for field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			vars[e.Name] = v
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			vars[e.Name] = "secret-" + e.ValueFrom.SecretKeyRef.Key
		default:
			vars[e.Name] = e.Value
		}
		if flag, ok := strings.CutPrefix(e.Name, "LEGATION_"); ok {
			name := strings.ToLower(strings.ReplaceAll(flag, "_", "-"))
			if fs.Lookup(name) == nil {
				t.Errorf("env %s: xds-node has no flag --%s", e.Name, name)
			}
			t.Setenv(e.Name, vars[e.Name])
		}
	}
	for _, a := range c.Args {
		a = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			v, ok := vars[name]
			if !ok {
				t.Errorf("argument %q: $(%s) is not a variable of the container", a, name)
			}
			return v
		})
		rep.args = append(rep.args, a)
		name, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("argument %q: want --flag=value", a)
			continue
		}
		if fs.Lookup(name) == nil {
			t.Errorf("argument %q: xds-node has no flag --%s", a, name)
		}
	}
	cfg, err := parseFlags(rep.args)
	if err != nil {
		t.Fatalf("xds-node rejects the chart's arguments %q:\n%v", rep.args, err)
	}
	if cfg.DevMode() {
		t.Errorf("arguments %q: dev mode (no --etcd-endpoints)", rep.args)
	}
	rep.cfg = cfg
	return rep
}

// port returns the port of a listen address.
func port(t *testing.T, flag, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		t.Fatalf("%s %q: no port", flag, addr)
	}
	return int32(n)
}

// containerPort resolves a Service's or probe's target port (a number or
// a name) against c's ports of protocol proto.
func containerPort(c *corev1.Container, target intstr.IntOrString, proto corev1.Protocol) (corev1.ContainerPort, bool) {
	for _, p := range c.Ports {
		pp := p.Protocol
		if pp == "" {
			pp = corev1.ProtocolTCP
		}
		if pp != proto {
			continue
		}
		if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
			return p, true
		}
	}
	return corev1.ContainerPort{}, false
}

// checkPortsAndProbes checks that the container listens where the flags
// say, that the probes hit /readyz and /healthz on --http-addr's port, and
// that the Services route to those ports.
func checkPortsAndProbes(t *testing.T, r rendered, rep chartReplica) {
	t.Helper()
	c := rep.container
	want := []struct {
		flag  string
		port  int32
		proto corev1.Protocol
	}{
		{"--xds-addr", port(t, "--xds-addr", rep.cfg.XDSAddr), corev1.ProtocolTCP},
		{"--http-addr", port(t, "--http-addr", rep.cfg.HTTPAddr), corev1.ProtocolTCP},
		{"--gossip-addr", port(t, "--gossip-addr", rep.cfg.GossipAddr), corev1.ProtocolTCP},
		{"--gossip-addr", port(t, "--gossip-addr", rep.cfg.GossipAddr), corev1.ProtocolUDP},
	}
	for _, w := range want {
		if _, ok := containerPort(c, intstr.FromInt32(w.port), w.proto); !ok {
			t.Errorf("xds-node container: no %s port %d (%s)", w.proto, w.port, w.flag)
		}
	}
	// The probes go to --probe-addr's port, plain HTTP, when it is set;
	// else to --http-addr's, HTTPS with TLS.
	httpPort, probeFlag := want[1].port, "--http-addr"
	scheme := corev1.URISchemeHTTP
	if rep.cfg.TLSCertFile != "" {
		scheme = corev1.URISchemeHTTPS
	}
	if rep.cfg.ProbeAddr != "" {
		httpPort, probeFlag, scheme = port(t, "--probe-addr", rep.cfg.ProbeAddr), "--probe-addr", corev1.URISchemeHTTP
		if _, ok := containerPort(c, intstr.FromInt32(httpPort), corev1.ProtocolTCP); !ok {
			t.Errorf("xds-node container: no TCP port %d (--probe-addr)", httpPort)
		}
	}
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("xds-node container: no %s with httpGet", p.kind)
			continue
		}
		g := p.probe.HTTPGet
		cp, ok := containerPort(c, g.Port, corev1.ProtocolTCP)
		if g.Path != p.path || !ok || cp.ContainerPort != httpPort || g.Scheme != scheme {
			t.Errorf("xds-node %s: %s %s on port %s (%d); want %s %s on %s's port %d",
				p.kind, g.Scheme, g.Path, g.Port.String(), cp.ContainerPort, scheme, p.path, probeFlag, httpPort)
		}
	}

	// Each Service selecting the replicas routes to their ports.
	exposed := map[int32]bool{}
	var gossip *corev1.Service
	for _, s := range r.services {
		if !matches(s.Spec.Selector, rep.dep.Spec.Template.Labels) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			proto := sp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			cp, ok := containerPort(c, sp.TargetPort, proto)
			if !ok {
				t.Errorf("Service %s port %s: targetPort %s is no %s port of xds-node", s.Name, sp.Name, sp.TargetPort.String(), proto)
				continue
			}
			if s.Spec.ClusterIP != corev1.ClusterIPNone {
				exposed[cp.ContainerPort] = true
			}
			if cp.ContainerPort == want[2].port {
				gossip = s
			}
		}
	}
	for _, w := range want[:2] {
		if !exposed[w.port] {
			t.Errorf("no Service with a cluster IP routes to %s's port %d", w.flag, w.port)
		}
	}
	if gossip == nil {
		t.Fatal("no Service routes to the gossip port")
	}
	if gossip.Spec.ClusterIP != corev1.ClusterIPNone || !gossip.Spec.PublishNotReadyAddresses {
		t.Errorf("gossip Service %s: clusterIP %q, publishNotReadyAddresses %v; want headless (None) and true",
			gossip.Name, gossip.Spec.ClusterIP, gossip.Spec.PublishNotReadyAddresses)
	}
	for _, j := range rep.cfg.Join {
		host, p, err := net.SplitHostPort(j)
		if wantHost := gossip.Name + "." + chartNamespace + ".svc"; err != nil || host != wantHost || p != strconv.Itoa(int(want[2].port)) {
			t.Errorf("--join %q: want the gossip Service, %s:%d", j, wantHost, want[2].port)
		}
	}
}

// initWriter is the name of an init container of spec that mounts the
// volume writable, or "".
func initWriter(spec corev1.PodSpec, volume string) string {
	for _, ic := range spec.InitContainers {
		for _, m := range ic.VolumeMounts {
			if m.Name == volume && !m.ReadOnly {
				return ic.Name
			}
		}
	}
	return ""
}

// checkPodSpec checks the replicas' security context, resources,
// anti-affinity and disruption budget, and that every file flag names a
// file of a mounted Secret or of a volume an init container writes.
func checkPodSpec(t *testing.T, r rendered, rep chartReplica) {
	t.Helper()
	spec := rep.dep.Spec.Template.Spec
	c := rep.container
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatal("xds-node: no pod or container securityContext")
	}
	nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
	seccomp := (sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault) ||
		(psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
	if !nonRoot || !seccomp || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("xds-node securityContext %+v, pod's %+v: want runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, drop ALL, seccomp RuntimeDefault", sc, psc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("xds-node resources %v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Error("xds-node pods: enableServiceLinks not false (Kubernetes' LEGATION_* service variables would reach xds-node, which reads LEGATION_* as flags)")
	}
	aa := spec.Affinity
	anti := false
	if aa != nil && aa.PodAntiAffinity != nil {
		for _, w := range aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			anti = anti || (w.PodAffinityTerm.LabelSelector != nil && matches(w.PodAffinityTerm.LabelSelector.MatchLabels, rep.dep.Spec.Template.Labels))
		}
		for _, term := range aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			anti = anti || (term.LabelSelector != nil && matches(term.LabelSelector.MatchLabels, rep.dep.Spec.Template.Labels))
		}
	}
	if !anti {
		t.Error("xds-node pods: no pod anti-affinity among the replicas")
	}
	pdb := false
	for _, p := range r.pdbs {
		pdb = pdb || (p.Spec.Selector != nil && matches(p.Spec.Selector.MatchLabels, rep.dep.Spec.Template.Labels))
	}
	if !pdb {
		t.Error("no PodDisruptionBudget selects the xds-node pods")
	}

	secretMounts := map[string]string{} // mount path: Secret, or the init container writing it
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			switch {
			case v.Name != m.Name:
			case v.Secret != nil:
				secretMounts[m.MountPath] = v.Secret.SecretName
			case v.EmptyDir != nil:
				if w := initWriter(spec, v.Name); w != "" {
					secretMounts[m.MountPath] = "written by init container " + w
				}
			}
		}
	}
	cfg := rep.cfg
	for _, f := range []struct{ flag, path string }{
		{"--tls-cert-file", cfg.TLSCertFile}, {"--tls-key-file", cfg.TLSKeyFile}, {"--client-ca-file", cfg.ClientCAFile},
		{"--etcd-cacert", cfg.EtcdSecurity.CACert}, {"--etcd-cert", cfg.EtcdSecurity.Cert}, {"--etcd-key", cfg.EtcdSecurity.Key},
		{"--gossip-key-file", cfg.GossipKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, ok := secretMounts[filepath.Dir(f.path)]; !ok {
			t.Errorf("%s %s: not a file of a mounted Secret or of a volume an init container writes (mounts: %v)", f.flag, f.path, secretMounts)
		}
	}
}

// renderChecked renders the chart with extra helm arguments and runs the
// checks every rendering passes.
func renderChecked(t *testing.T, extra ...string) (rendered, chartReplica, []byte) {
	t.Helper()
	out, err := helmTemplate(t, extra...)
	if err != nil {
		t.Fatal(err)
	}
	r := decodeManifests(t, out)
	rep := checkReplica(t, r)
	checkPortsAndProbes(t, r, rep)
	checkPodSpec(t, r, rep)
	return r, rep, out
}

// TestChartDefault renders the default values with manifestsValues over
// them, as `make manifests` does: a bundled etcd over TLS whose Secrets
// are named, not generated; the committed manifests must be that
// rendering, with no private key in it.
func TestChartDefault(t *testing.T) {
	r, rep, out := renderChecked(t, "-f", manifestsValues)
	checkBundledEtcd(t, r, rep, 3)
	if len(r.secrets) != 0 {
		t.Errorf("%s: %d Secrets rendered; want none (a key published in the repository protects nothing)", manifestsFile, len(r.secrets))
	}

	committed, err := os.ReadFile(filepath.Join(repoRoot(t), manifestsFile))
	if err != nil {
		t.Fatalf("%v: run `make manifests`", err)
	}
	if !bytes.Equal(committed, out) {
		a, b := strings.Split(string(committed), "\n"), strings.Split(string(out), "\n")
		line := 0
		for line < len(a) && line < len(b) && a[line] == b[line] {
			line++
		}
		got, want := "(end of file)", "(end of file)"
		if line < len(a) {
			got = a[line]
		}
		if line < len(b) {
			want = b[line]
		}
		t.Errorf("%s is stale, it differs from the chart's rendering at line %d:\n  committed: %s\n  rendered:  %s\nrun `make manifests`",
			manifestsFile, line+1, got, want)
	}
}

// checkBundledEtcd checks the bundled etcd StatefulSet and that
// --etcd-endpoints names its members.
func checkBundledEtcd(t *testing.T, r rendered, rep chartReplica, members int32) {
	t.Helper()
	if len(r.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets; want the bundled etcd's", len(r.statefulSets))
	}
	s := r.statefulSets[0]
	if s.Spec.Replicas == nil || *s.Spec.Replicas != members {
		t.Errorf("etcd StatefulSet %s: replicas %v; want %d", s.Name, s.Spec.Replicas, members)
	}
	if len(s.Spec.VolumeClaimTemplates) == 0 {
		t.Errorf("etcd StatefulSet %s: no volumeClaimTemplates", s.Name)
	}
	if !matches(s.Spec.Selector.MatchLabels, s.Spec.Template.Labels) {
		t.Errorf("etcd StatefulSet %s: selector does not match its pods", s.Name)
	}
	c := s.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[k] = v
	}
	if flags["auto-compaction-mode"] == "" || flags["auto-compaction-retention"] == "" {
		t.Errorf("etcd args %q: no --auto-compaction-mode and --auto-compaction-retention", c.Args)
	}
	if n := len(strings.Split(flags["initial-cluster"], ",")); n != int(members) {
		t.Errorf("etcd --initial-cluster %q: %d members; want %d", flags["initial-cluster"], n, members)
	}
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Error("etcd container: no readiness or liveness probe")
	}
	var headless *corev1.Service
	for _, svc := range r.services {
		if svc.Name == s.Spec.ServiceName {
			headless = svc
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses ||
		!matches(headless.Spec.Selector, s.Spec.Template.Labels) {
		t.Fatalf("etcd StatefulSet %s: serviceName %q is not a headless Service publishing not-ready members and selecting them", s.Name, s.Spec.ServiceName)
	}
	client, ok := containerPort(&c, intstr.FromString("client"), corev1.ProtocolTCP)
	if !ok {
		t.Fatal("etcd container: no port named client")
	}
	var want []string
	for i := range members {
		want = append(want, fmt.Sprintf("https://%s-%d.%s.%s.svc:%d", s.Name, i, headless.Name, chartNamespace, client.ContainerPort))
	}
	if !slices.Equal(rep.cfg.EtcdEndpoints, want) {
		t.Errorf("--etcd-endpoints %q; want the bundled members %q", rep.cfg.EtcdEndpoints, want)
	}
}
