package docs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/legation-io/legation/internal/testkit/docgen"
)

// TestDocsAlertRules keeps the alerting rules shown on monitoring.md
// those of deploy/prometheus/legation-alerts.yaml (whose metrics
// internal/replica's tests check); `make docs` rewrites the region.
func TestDocsAlertRules(t *testing.T) {
	const file = "deploy/prometheus/legation-alerts.yaml"
	raw, err := os.ReadFile(filepath.Join(docgen.Root(t), file))
	if err != nil {
		t.Fatal(err)
	}
	docgen.Region(t, "docs/operations/monitoring.md", "alerts", "```yaml\n"+string(raw)+"```\n")
}
