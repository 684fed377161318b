package clustertest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// built holds the binaries of this test process, built at the first Start.
var built struct {
	sync.Mutex
	done bool   // guarded; set once the build ran, even if it failed
	dir  string // guarded
	err  error  // guarded
}

// binDirPrefix names the per-process binary directories in os.TempDir().
const binDirPrefix = "legation-clustertest-bin-"

// binaries returns a directory holding etcd and xds-node, built once per
// test process. The directory is named after this process; the next
// test process removes it once this one has ended (nothing runs at a test
// process's exit to do it sooner).
func binaries(t testing.TB, root string) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if !built.done {
		built.done = true
		start := time.Now()
		built.dir, built.err = build(root)
		if built.err == nil {
			t.Logf("clustertest: built etcd and xds-node (race detector: %t) in %s", raceEnabled(), time.Since(start).Round(time.Millisecond))
		}
	}
	if built.err != nil {
		t.Fatalf("clustertest: %v", built.err)
	}
	return built.dir
}

func build(root string) (string, error) {
	sweepBinDirs()
	goTool, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		return "", fmt.Errorf("the go command, to build etcd and xds-node: %w", err)
	}
	dir := filepath.Join(os.TempDir(), binDirPrefix+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Under -race the replicas are built with -race too: the packages are
	// those the test build already compiled, and a data race in a replica
	// then shows in its log (checkLogs). etcd is not ours: a plain build.
	xdsArgs := []string{"build", "-o", filepath.Join(dir, "xds-node")}
	if raceEnabled() {
		xdsArgs = append(xdsArgs, "-race")
	}
	builds := [][]string{
		{"build", "-o", filepath.Join(dir, "etcd"), "go.etcd.io/etcd/server/v3"},
		append(xdsArgs, "./cmd/xds-node"),
	}
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, args := range builds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(goTool, args...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), root, err, out)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// sweepBinDirs removes the binary directories of test processes that have
// ended.
func sweepBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPrefix))
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		os.RemoveAll(d)
	}
}

// repoRoot is the module's root directory, where deploy/local/cluster.sh
// is: from `go env GOMOD` in the test's directory (any package of the
// module), else from this source file's path.
func repoRoot(t testing.TB) string {
	t.Helper()
	var candidates []string
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if gomod := strings.TrimSpace(string(out)); gomod != "" && gomod != os.DevNull {
			candidates = append(candidates, filepath.Dir(gomod))
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "..", ".."))
	}
	for _, root := range candidates {
		if _, err := os.Stat(filepath.Join(root, "deploy", "local", "cluster.sh")); err == nil {
			return filepath.Clean(root)
		}
	}
	t.Fatalf("clustertest: no deploy/local/cluster.sh under %q: run the tests inside the module", candidates)
	return ""
}

// raceEnabled reports whether this test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// haproxyPath finds HAProxy as the script does: on PATH, else in
// /usr/sbin (not on a non-root user's PATH on Debian).
func haproxyPath() (string, error) {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	const sbin = "/usr/sbin/haproxy"
	if _, err := os.Stat(sbin); err == nil {
		return sbin, nil
	}
	return "", errors.New("haproxy is not installed: `make setup` installs it (Debian package haproxy)")
}
