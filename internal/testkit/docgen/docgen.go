// Package docgen keeps the generated parts of the Markdown docs equal to
// what the code gives: flag tables from the flag sets, the etcd key layout
// from keyspace, the metrics catalogue from the registry, and bootstraps
// included from deploy/envoy. A generated part is a region of a page
// between two marker lines:
//
//	<!-- NAME:begin -->
//	...
//	<!-- NAME:end -->
//
// A test renders what the region must hold and calls Region: the test
// fails when the page differs, and `make docs` (UPDATE_DOCS=1) rewrites
// the region instead.
package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// UpdateEnv is the environment variable that makes Region rewrite the
// pages rather than compare them; `make docs` sets it.
const UpdateEnv = "UPDATE_DOCS"

// Update reports whether this run rewrites the generated regions.
func Update() bool { return os.Getenv(UpdateEnv) == "1" }

// Root is the repository's root directory: the nearest directory above
// the working directory holding go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("docgen: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Region checks that the region name of file (a path relative to the
// repository's root) holds want, or rewrites it under UPDATE_DOCS=1. want
// is the region's lines, without the markers; a missing trailing newline
// is added.
func Region(t testing.TB, file, name, want string) {
	t.Helper()
	path := filepath.Join(Root(t), file)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want != "" && !strings.HasSuffix(want, "\n") {
		want += "\n"
	}
	from, to, err := Find(doc, name)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	got := string(doc[from:to])
	if got == want {
		return
	}
	if Update() {
		out := append(append(append([]byte(nil), doc[:from]...), want...), doc[to:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: rewrote the %q region", file, name)
		return
	}
	line := 1 + bytes.Count(doc[:from], []byte("\n"))
	t.Errorf("%s:%d: the %q region is stale; run `make docs` and commit the result\n%s",
		file, line, name, diff(got, want))
}

// Find returns the byte range of the region name in doc: from the line
// after its begin marker to the start of its end marker's line.
func Find(doc []byte, name string) (from, to int, err error) {
	begin := []byte("<!-- " + name + ":begin -->\n")
	end := []byte("<!-- " + name + ":end -->")
	i := bytes.Index(doc, begin)
	if i < 0 {
		return 0, 0, fmt.Errorf("no %q line", strings.TrimSpace(string(begin)))
	}
	if bytes.Count(doc, begin) > 1 {
		return 0, 0, fmt.Errorf("the %q region is marked twice", name)
	}
	from = i + len(begin)
	j := bytes.Index(doc[from:], end)
	if j < 0 {
		return 0, 0, fmt.Errorf("the %q region has no %q line", name, string(end))
	}
	return from, from + j, nil
}

// diff shows the first lines where got and want part.
func diff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(g), len(w)) && shown < 5; i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			fmt.Fprintf(&b, "region line %d:\n  page: %s\n  code: %s\n", i+1, gl, wl)
			shown++
		}
	}
	return b.String()
}
