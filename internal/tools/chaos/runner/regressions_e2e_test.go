//go:build e2e

package runner

import (
	"log/slog"
	"testing"

	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// TestRegressions runs every named regression seed with the shape it found
// its bug with (make e2e): each must pass.
func TestRegressions(t *testing.T) {
	bins := localcluster.BuildForTest(t)
	for _, r := range Regressions {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			cfg := r.Config(DefaultConfig())
			cfg.Dir = shortTempDir(t)
			cfg.Binaries = bins
			cfg.Logger = slog.New(slog.NewTextHandler(testbase.LogWriter(t), nil))
			runSeed(t, cfg)
		})
	}
}
