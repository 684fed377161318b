package adminctl

import (
	"strings"
	"testing"
	"unicode"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain node-1":     "plain node-1",
		"édge 日本 \\ back":  "édge 日本 \\ back",
		"evil\x1b[31mred":  `evil\x1b[31mred`,
		"ok\rforged":       `ok\rforged`,
		"col\tshift\nline": `col\tshift\nline`,
		"c1\u0085del\x7f":  `c1\u0085del\x7f`,
		"raw\xffbyte\x9b[": `raw\xffbyte\x9b[`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzPrintable(f *testing.F) {
	f.Add("node\x1b]0;title\x07")
	f.Add("a\xffb")
	f.Fuzz(func(t *testing.T, s string) {
		got := printable(s)
		if strings.ContainsFunc(got, unicode.IsControl) || strings.ContainsRune(got, '\uFFFD') && !strings.ContainsRune(s, '\uFFFD') {
			t.Errorf("printable(%q) = %q: a control character or a replaced byte left", s, got)
		}
	})
}

// TestTablesEscapeClientText: what clients sent (a node id, NACK text)
// prints escaped in xdsadmin's tables, so that a terminal escape or a
// carriage return cannot rewrite the operator's screen.
func TestTablesEscapeClientText(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	applyID(t, h, "-f", writeFile(t, "v1.yaml", clusterYAML("a", "1s")))
	const nack = "bad\x1b[2J\rcluster a"
	h.statusWriter("replica-a", nodeStatus("n\x1b]0;owned\x07", "edge", map[string]status.TypeStatus{
		"cluster": {VersionSent: "9", VersionAcked: "1", NackVersion: "9", LastNack: nack},
	}))
	for _, cmd := range [][]string{{"status"}, {"nacks"}, {"rollout", "list"}} {
		out := h.mustRun(cmd...)
		if strings.ContainsAny(out, "\x1b\r\x07") {
			t.Errorf("xdsadmin %s printed a control character: %q", strings.Join(cmd, " "), out)
		}
	}
	if out := h.mustRun("status"); !strings.Contains(out, `n\x1b]0;owned\a`) {
		t.Errorf("xdsadmin status: the node id not shown escaped: %q", out)
	}
	if out := h.mustRun("nacks"); !strings.Contains(out, `bad\x1b[2J`) {
		t.Errorf("xdsadmin nacks: the NACK text not shown escaped: %q", out)
	}
}
