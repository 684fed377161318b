package keyspace

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// update rewrites README.md's key layout table from Layout:
// go test ./internal/state/keyspace -run TestREADMEKeyLayout -update
var update = flag.Bool("update", false, "rewrite README.md's etcd key layout table from Layout")

const (
	readme        = "../../../README.md"
	layoutHeading = "## etcd key layout"
)

// table renders Layout as the README's table, under DefaultPrefix.
func table() []string {
	out := []string{
		"| Key | Value | Writer | Written by | Read by |",
		"| --- | --- | --- | --- | --- |",
	}
	for _, e := range Layout() {
		out = append(out, "| `"+e.Dir.Key(DefaultPrefix, e.Key)+"` | "+e.Value+" | "+e.Writer.String()+" | "+e.WrittenBy+" | "+e.ReadBy+" |")
	}
	return out
}

// readmeTable finds the first table after the key layout heading in
// lines: its first line and the line after its last.
func readmeTable(t *testing.T, lines []string) (from, to int) {
	t.Helper()
	from = -1
	for i, l := range lines {
		switch {
		case from < 0 && l == layoutHeading:
			from = 0
		case from == 0 && strings.HasPrefix(l, "## "):
			t.Fatalf("README.md: the %q section has no table", layoutHeading)
		case from == 0 && strings.HasPrefix(l, "|"):
			from = i
		case from > 0 && !strings.HasPrefix(l, "|"):
			return from, i
		}
	}
	if from <= 0 {
		t.Fatalf("README.md: no table under %q", layoutHeading)
	}
	return from, len(lines)
}

// TestREADMEKeyLayout: README.md's etcd key layout table is Layout's,
// row for row.
func TestREADMEKeyLayout(t *testing.T) {
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	from, to := readmeTable(t, lines)
	want := table()
	if *update {
		out := append(append(append([]string(nil), lines[:from]...), want...), lines[to:]...)
		if err := os.WriteFile(readme, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got := lines[from:to]
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("README.md:%d:\n got: %s\nwant: %s", from+i+1, g, w)
		}
	}
	if t.Failed() {
		t.Logf("the table Layout gives (or run this test with -update):\n%s", strings.Join(want, "\n"))
	}
}
