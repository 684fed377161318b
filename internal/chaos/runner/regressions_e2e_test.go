//go:build e2e

package runner

import (
	"context"
	"log/slog"
	"testing"

	"github.com/legation-io/legation/internal/localcluster"
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
			cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
			sum, err := Run(context.Background(), cfg)
			t.Log(sum.Line())
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range sum.Violations {
				t.Error(v)
			}
			for _, c := range sum.Crashes {
				t.Error(c)
			}
			if sum.HealError != "" {
				t.Error(sum.HealError)
			}
		})
	}
}
