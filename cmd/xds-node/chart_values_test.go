package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/replica"
)

// The chart's values beyond the defaults, those it refuses, and how its
// values cover xds-node's flags.

// TestChartExternalEtcdTLS renders external etcd over TLS with a user,
// mTLS on the xDS port and an encrypted gossip.
func TestChartExternalEtcdTLS(t *testing.T) {
	r, rep, _ := renderChecked(t,
		"--set", "etcd.bundled.enabled=false",
		"--set", "etcd.external.endpoints={https://etcd-0.example.org:2379,https://etcd-1.example.org:2379}",
		"--set", "etcd.external.tls.secretName=etcd-client",
		"--set", "etcd.external.username=legation",
		"--set", "etcd.external.passwordSecret.name=etcd-password",
		"--set", "tls.enabled=true",
		"--set", "tls.secretName=legation-tls",
		"--set", "tls.replicaIdentities={spiffe://example.org/legation/replica}",
		"--set", "gossip.keySecret.name=legation-gossip",
		"--set", "config.lrsClusters={a,b}",
		"--set", "config.maxStreams=50000",
		"--set", "antiAffinity=hard",
		"--set", "replicaCount=5")
	if len(r.statefulSets) != 0 {
		t.Errorf("external etcd: %d StatefulSets rendered; want none", len(r.statefulSets))
	}
	cfg := rep.cfg
	wantEps := []string{"https://etcd-0.example.org:2379", "https://etcd-1.example.org:2379"}
	if !slices.Equal(cfg.EtcdEndpoints, wantEps) || cfg.EtcdSecurity.CACert == "" || cfg.EtcdSecurity.Cert == "" ||
		cfg.EtcdSecurity.Key == "" || cfg.EtcdSecurity.Username != "legation" || cfg.EtcdSecurity.Password == "" {
		t.Errorf("etcd: endpoints %q, security %+v; want %q with a CA, client certificate, user and password", cfg.EtcdEndpoints, cfg.EtcdSecurity, wantEps)
	}
	if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" || cfg.ClientCAFile == "" || cfg.GossipKeyFile == "" ||
		!slices.Equal(cfg.ReplicaIdentities, []string{"spiffe://example.org/legation/replica"}) {
		t.Errorf("TLS %q %q %q, gossip key %q, replica identities %q: want all set", cfg.TLSCertFile, cfg.TLSKeyFile, cfg.ClientCAFile, cfg.GossipKeyFile, cfg.ReplicaIdentities)
	}
	if !slices.Equal(cfg.LRSClusters, []string{"a", "b"}) || cfg.MaxStreams != 50000 {
		t.Errorf("--lrs-clusters %q, --max-streams %d: want [a b], 50000", cfg.LRSClusters, cfg.MaxStreams)
	}
	if aa := rep.dep.Spec.Template.Spec.Affinity.PodAntiAffinity; len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("antiAffinity=hard: %d required terms; want 1", len(aa.RequiredDuringSchedulingIgnoredDuringExecution))
	}
	if n := rep.dep.Spec.Replicas; n == nil || *n != 5 {
		t.Errorf("replicas %v; want 5", n)
	}
}

// TestChartBundledEtcdFiveMembers renders a five-member bundled etcd and
// changed ports.
func TestChartBundledEtcdFiveMembers(t *testing.T) {
	r, rep, _ := renderChecked(t, "--set", "etcd.bundled.replicas=5",
		"--set", "ports.xds=9000", "--set", "ports.http=9001", "--set", "ports.gossip=9002", "--set", "gossip.joinService=false")
	checkBundledEtcd(t, r, rep, 5)
	if rep.cfg.XDSAddr != ":9000" || len(rep.cfg.Join) != 0 {
		t.Errorf("--xds-addr %q, --join %q: want :9000 and none", rep.cfg.XDSAddr, rep.cfg.Join)
	}
}

// TestChartBadValues checks that values the chart cannot honour fail the
// rendering with a message naming them.
func TestChartBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"no etcd", []string{"etcd.bundled.enabled=false"}, "etcd.external.endpoints"},
		{"both etcds", []string{"etcd.external.endpoints={etcd:2379}"}, "choose one"},
		{"user without password", []string{"etcd.bundled.enabled=false", "etcd.external.endpoints={etcd:2379}", "etcd.external.username=u"}, "passwordSecret"},
		{"bad anti-affinity", []string{"antiAffinity=maybe"}, "antiAffinity"},
		// An insecure etcd under tls.enabled: mTLS would guard rules that
		// anyone reaching etcd rewrites.
		{"tls with a plain-text bundled etcd", []string{"tls.enabled=true", "tls.secretName=t", "etcd.bundled.tls.enabled=false", "etcd.bundled.auth.enabled=false"}, "etcd.bundled.tls.enabled"},
		{"tls with a plain-text external etcd", []string{"tls.enabled=true", "tls.secretName=t", "etcd.bundled.enabled=false", "etcd.external.endpoints={etcd:2379}"}, "etcd.external.tls.secretName"},
		{"tls with an http:// external etcd", []string{"tls.enabled=true", "tls.secretName=t", "etcd.bundled.enabled=false", "etcd.external.endpoints={http://etcd:2379}"}, "etcd.external.tls.secretName"},
		{"password over plain text", []string{"etcd.bundled.enabled=false", "etcd.external.endpoints={etcd:2379}", "etcd.external.username=u", "etcd.external.passwordSecret.name=p"}, "etcd.external.tls.secretName"},
		{"auth without TLS", []string{"etcd.bundled.tls.enabled=false"}, "etcd.bundled.tls.enabled"},
		// A cluster whose gossip anyone may join.
		{"cluster without a gossip key", []string{"gossip.keySecret.generate=false"}, "gossip.keySecret.name"},
		// insecure turns TLS off, nothing else.
		{"insecure without a gossip key", []string{"insecure=true", "gossip.keySecret.generate=false"}, "gossip.keySecret.name"},
		{"insecure with a password over plain text", []string{"insecure=true", "etcd.bundled.enabled=false", "etcd.external.endpoints={etcd:2379}",
			"etcd.external.username=u", "etcd.external.passwordSecret.name=p"}, "etcd.external.tls.secretName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := helmTemplate(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %q: error %v; want one naming %q", tc.set, err, tc.want)
			}
		})
	}
}

// TestChartUnknownFlagFails makes sure the flag check can fail: a flag
// xds-node does not define, passed through extraArgs, is rejected.
func TestChartUnknownFlagFails(t *testing.T) {
	out, err := helmTemplate(t, "--set", "extraArgs={--no-such-flag=1}")
	if err != nil {
		t.Fatal(err)
	}
	r := decodeManifests(t, out)
	for _, d := range r.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != "xds-node" {
				continue
			}
			fs := xdsNodeFlags()
			if fs.Lookup("no-such-flag") != nil {
				t.Fatal("--no-such-flag exists")
			}
			if !slices.Contains(c.Args, "--no-such-flag=1") {
				t.Fatalf("extraArgs not passed: %q", c.Args)
			}
			if _, err := parseFlags(c.Args); err == nil || !strings.Contains(err.Error(), "no-such-flag") {
				t.Errorf("parseFlags(%q): %v; want an error naming --no-such-flag", c.Args, err)
			}
			return
		}
	}
	t.Fatal("no xds-node container")
}

// TestStrictDecode makes sure the decoding is strict: a field
// Kubernetes does not know, or knows under another case, is an error.
func TestStrictDecode(t *testing.T) {
	base := "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  namespace: legation\nspec:\n"
	for _, tc := range []struct{ spec, want string }{
		{"  clusterIp: None\n", "clusterIp"},
		{"  headless: true\n", "headless"},
		{"  clusterIP: None\n  clusterIP: None\n", "clusterIP"},
		{"  ports: 18000\n", "ports"},
	} {
		var s corev1.Service
		if err := strictDecode([]byte(base+tc.spec), &s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("strictDecode of spec %q: %v; want an error naming %s", tc.spec, err, tc.want)
		}
	}
	var s corev1.Service
	if err := strictDecode([]byte(base+"  clusterIP: None\n"), &s); err != nil || s.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("strictDecode of a valid Service: %v, clusterIP %q", err, s.Spec.ClusterIP)
	}
}

// xdsNodeFlags is xds-node's flag set.
func xdsNodeFlags() *pflag.FlagSet {
	cfg := replica.DefaultConfig()
	fs, _, _ := newFlagSet(&cfg)
	return fs
}

// flagsLeftOut are the xds-node flags the chart has no value for: dev
// mode's, --standalone (a replica alone), --etcd-password (refused),
// --etcd-password-file (the chart passes LEGATION_ETCD_PASSWORD from a
// Secret instead) and --version (an action that prints and exits, no
// setting of a running replica).
var flagsLeftOut = []string{"data-dir", "dev-etcd-addr", "standalone", "etcd-password", "etcd-password-file", flagDebugOpen, flagVersion}

// TestChartCoversFlags checks that every xds-node flag has a value in the
// chart: one the templates set, a key of values.yaml's config, or one of
// flagsLeftOut; and that every config key names a flag, null ones too.
func TestChartCoversFlags(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config map[string]any `json:"config"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	fs := xdsNodeFlags()
	covered := map[string]string{}
	for key := range values.Config {
		var b strings.Builder
		for _, r := range key {
			if r >= 'A' && r <= 'Z' {
				b.WriteByte('-')
				r += 'a' - 'A'
			}
			b.WriteRune(r)
		}
		name := b.String()
		if fs.Lookup(name) == nil {
			t.Errorf("values.yaml config.%s: xds-node has no flag --%s", key, name)
		}
		covered[name] = "values.yaml config." + key
	}
	// The flags the templates set, TLS and etcd authentication on.
	_, rep, _ := renderChecked(t, "--set", "etcd.bundled.enabled=false",
		"--set", "etcd.external.endpoints={https://etcd:2379}", "--set", "etcd.external.tls.secretName=etcd-client",
		"--set", "etcd.external.username=legation", "--set", "etcd.external.passwordSecret.name=etcd-password",
		"--set", "tls.enabled=true", "--set", "tls.secretName=legation-tls",
		"--set", "tls.replicaIdentities={spiffe://example.org/r}", "--set", "tls.authzDefaultTrustDomain=example.org",
		"--set", "gossip.keySecret.name=gossip")
	for _, a := range rep.args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, ok := covered[name]; !ok {
			covered[name] = "the templates"
		}
	}
	for _, name := range flagsLeftOut {
		covered[name] = "left out"
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := covered[f.Name]; !ok {
			t.Errorf("xds-node --%s: no value in the chart; add it to values.yaml's config (or to flagsLeftOut, saying why)", f.Name)
		}
	})
}
