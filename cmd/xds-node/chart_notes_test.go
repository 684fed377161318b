package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// labValues is the lab values file: insecure, documented in NOTES.
const labValues = chartDir + "/values-lab.yaml"

// renderNotes renders NOTES.txt with more helm arguments (helm template
// leaves NOTES out, so a copy of the chart holds it as a template).
func renderNotes(t *testing.T, extra ...string) string {
	t.Helper()
	root := repoRoot(t)
	dir := filepath.Join(t.TempDir(), "legation")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, chartDir))); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wrapped := "notes: |\n  " + strings.ReplaceAll(string(notes), "\n", "\n  ") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes-test.yaml"), []byte(wrapped), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"tool", "-modfile=hack/tools/go.mod", "helm", "template", chartRelease, dir,
		"--namespace", chartNamespace, "--show-only", "templates/notes-test.yaml"}, extra...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var doc struct {
		Notes string `json:"notes"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("NOTES with %q: %v\n%s", extra, err, out)
	}
	return doc.Notes
}

// TestChartNotes checks that NOTES.txt points Envoy at the xDS Service
// and port, says how to reach etcd and, with mTLS, how to issue an
// Envoy's certificate and rule; and that it warns of every insecure
// setting, loudest with insecure (the lab values file).
func TestChartNotes(t *testing.T) {
	const lab = "INSECURE (insecure=true)"
	for _, tc := range []struct {
		args []string
		want []string
		not  []string
	}{
		{nil, []string{"legation-xds.legation.svc:18000", "address: legation-xds.legation.svc, port_value: 18000", "bundled 3-member etcd",
			"Image: ghcr.io/legation-io/legation:", "get secret legation-etcd-admin", "LEGATION_ETCD_ENDPOINTS=https://127.0.0.1:2379",
			"of Secret legation-ca (the chart's CA)", "get secret legation-ca", "xdsadmin cert issue --ca-cert legation-ca-tls.crt",
			"xdsadmin authz grant spiffe://cluster.local/ns/edge/envoy", "present spiffe://cluster.local/ns/legation/legation/replica",
			"curl -k https://"},
			[]string{"INSECURE", "not encrypted", "plain text"}},
		{[]string{"--set", "ports.xds=9000", "--set", "tls.secretName=legation-tls", "--set", "etcd.bundled.enabled=false",
			"--set", "etcd.external.endpoints={https://etcd:2379}", "--set", "gossip.keySecret.name=g"},
			[]string{"port_value: 9000", "in Secret legation-tls", "LEGATION_ETCD_ENDPOINTS=https://etcd:2379", "xdsadmin authz grant"},
			[]string{"INSECURE", "xdsadmin cert issue", "legation-ca"}},
		{[]string{"--set", "replicaCount=1", "--set", "gossip.keySecret.generate=false", "--set", "tls.enabled=false",
			"--set", "etcd.bundled.tls.enabled=false", "--set", "etcd.bundled.auth.enabled=false"},
			[]string{"not encrypted", "INSECURE: the bundled etcd is plain text", "serve plain text (tls.enabled=false)", "curl http://"},
			[]string{lab, "mTLS is on"}},
		{[]string{"-f", labValues},
			[]string{lab, "The bundled etcd is plain text without authentication", "LEGATION_ETCD_ENDPOINTS=127.0.0.1:2379"},
			[]string{"mTLS is on", "not encrypted", "UpstreamTlsContext"}},
	} {
		notes := renderNotes(t, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(notes, w) {
				t.Errorf("NOTES with %q: no %q in\n%s", tc.args, w, notes)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(notes, w) {
				t.Errorf("NOTES with %q: %q in\n%s", tc.args, w, notes)
			}
		}
		if slices.Contains(tc.args, labValues) && !strings.HasPrefix(notes, "****") {
			t.Errorf("NOTES with %q: the warning is not first:\n%s", tc.args, notes)
		}
	}
}
