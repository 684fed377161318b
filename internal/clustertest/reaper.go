package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// reaperScript waits on its standard input, a pipe whose other end only
// the test process holds. "done" means the test stopped the cluster
// itself; end of file means the test process died (a test timeout's
// panic, a kill) without its cleanups: then it stops the cluster and
// removes etcd's data, leaving the logs in DIR for a post-mortem. It
// ignores the terminal's signals, which reach the whole process group on
// Ctrl-C, so that it outlives the test process it watches.
const reaperScript = `trap '' INT HUP TERM
read -r line || true
[ "$line" = done ] && exit 0
bash "$0" down
rm -rf "$DIR"/etcd-*.data`

// startReaper starts a process that runs `cluster.sh down` if this
// process dies with the cluster running: the cluster's processes are not
// its children and would outlive it. The returned func, called once the
// cluster is down, ends the reaper without it doing anything.
func startReaper(script, dir string, env []string) (func(), error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	logf, err := os.Create(filepath.Join(dir, "reaper.log"))
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("reaper: %w", err)
	}
	cmd := exec.Command("bash", "-c", reaperScript, script)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pr, logf, logf
	err = cmd.Start()
	pr.Close() // the reaper's copy is the one that counts
	logf.Close()
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("reaper: %w", err)
	}
	return func() {
		fmt.Fprintln(pw, "done") //nolint:errcheck // if it is gone there is nothing to tell
		pw.Close()
		cmd.Wait() //nolint:errcheck // its exit status says nothing more
	}, nil
}
