package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// Binaries are the paths of the programs a cluster runs.
type Binaries struct {
	Etcd    string
	XDSNode string
}

// Build builds etcd (go.etcd.io/etcd/server/v3 at the version go.mod
// pins) and ./cmd/xds-node of the module in root into dir, both at once,
// with the go command on PATH. With race, xds-node is built with the race
// detector (a data race then shows in a replica's log and exit status);
// etcd is not ours and never is. Go's build cache makes a build of
// unchanged code quick.
func Build(ctx context.Context, root, dir string, race bool) (Binaries, error) {
	goTool, err := exec.LookPath("go") // go test and go run put GOROOT/bin first in PATH
	if err != nil {
		return Binaries{}, fmt.Errorf("localcluster: the go command, to build etcd and xds-node: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("localcluster: %w", err)
	}
	bins := Binaries{Etcd: filepath.Join(dir, "etcd"), XDSNode: filepath.Join(dir, "xds-node")}
	xds := []string{"build", "-o", bins.XDSNode}
	if race {
		xds = append(xds, "-race")
	}
	builds := [][]string{
		{"build", "-o", bins.Etcd, "go.etcd.io/etcd/server/v3"},
		append(xds, "./cmd/xds-node"),
	}
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, args := range builds {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, goTool, args...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("localcluster: go %s (in %s): %v\n%s", strings.Join(args, " "), root, err, indent(string(out)))
			}
		})
	}
	wg.Wait()
	return bins, errors.Join(errs...)
}

// ModuleRoot returns the root directory of this module (where go.mod and
// cmd/xds-node are): from `go env GOMOD` in the current directory, else
// from this source file's path.
func ModuleRoot() (string, error) {
	var candidates []string
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if gomod := strings.TrimSpace(string(out)); gomod != "" && gomod != os.DevNull {
			candidates = append(candidates, filepath.Dir(gomod))
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "..", "..", ".."))
	}
	for _, root := range candidates {
		if _, err := os.Stat(filepath.Join(root, "cmd", "xds-node")); err == nil {
			return filepath.Clean(root), nil
		}
	}
	return "", fmt.Errorf("localcluster: no cmd/xds-node under %q: run inside the module", candidates)
}
