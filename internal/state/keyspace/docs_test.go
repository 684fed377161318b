package keyspace

import (
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/testkit/docgen"
)

// table renders Layout as the key layout table of the docs, under
// DefaultPrefix.
func table() string {
	var b strings.Builder
	b.WriteString("| Key | Value | Writer | Written by | Read by |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, e := range Layout() {
		writer := e.Writer.String()
		if e.Controller {
			writer += ", replica (rollout controller)"
		}
		b.WriteString("| `" + e.Dir.Key(DefaultPrefix, e.Key) + "` | " + e.Value + " | " +
			writer + " | " + e.WrittenBy + " | " + e.ReadBy + " |\n")
	}
	return b.String()
}

// TestDocsKeyLayout: the etcd key layout table of
// docs/reference/etcd-key-layout.md is Layout's, row for row; `make docs`
// rewrites it.
func TestDocsKeyLayout(t *testing.T) {
	docgen.Region(t, "docs/reference/etcd-key-layout.md", "key-layout", table())
}
