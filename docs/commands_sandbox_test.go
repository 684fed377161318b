package docs

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The bounds of TestCommands' waits.
const (
	// readyTimeout bounds a start block's wait for its ready output, and
	// runTimeout a run block's run: both cover a build of every binary
	// with a cold cache on a loaded machine.
	readyTimeout = 5 * time.Minute
	runTimeout   = 5 * time.Minute
	// ofTimeout bounds the wait for a change to show in a running
	// block's output: below the quick start's 30 s TTL, after which the
	// change is undone.
	ofTimeout = 25 * time.Second
	// holderTimeout bounds the sandbox's setup and its teardown.
	holderTimeout = 30 * time.Second
	pollInterval  = 100 * time.Millisecond
)

// holderScript is the sandbox's holder, PID 1 of its namespaces: $1 is the
// repository, $2 a scratch directory. It brings loopback up, lays the
// overlay over the repository, hides what a fresh clone does not have,
// says ready and waits for its standard input to close; its exit kills
// every process of the PID namespace.
const holderScript = `set -e
ip link set lo up
mkdir "$2/upper" "$2/work"
if ! mount -t overlay legation-docs -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$1" 2>/dev/null; then
	# $2 is on a filesystem that cannot hold an upper layer (an overlay
	# itself): a tmpfs, mounted in this namespace only, can.
	mount -t tmpfs legation-docs "$2"
	mkdir "$2/upper" "$2/work"
	mount -t overlay legation-docs -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$1"
fi
rm -rf "$1/bin" "$1/legation-data"
echo ready
exec cat >/dev/null
`

// sandbox is where one page's commands run (see TestCommands, Isolation).
type sandbox struct {
	root    string         // the repository, at the same path inside
	nsArgs  []string       // nsenter's flags that join the namespaces
	env     []string       // the commands' environment
	outDir  string         // the blocks' output files
	holder  *proc          // unshare, then the holder script
	stdin   io.WriteCloser // the holder's: closing it ends the sandbox
	procs   map[string]*proc
	started []*proc
}

// proc is a running or finished block.
type proc struct {
	cmd  *exec.Cmd
	out  string        // its output file: stdout and stderr
	done chan struct{} // closed once it has exited, err set
	err  error
}

// newSandbox makes the namespaces for t, with the repository at root, and
// removes them, with every process in them, in t.Cleanup.
func newSandbox(t *testing.T, root string) *sandbox {
	t.Helper()
	if strings.ContainsAny(root, ",:\\") {
		t.Fatalf("the repository's path %q has a character overlay options cannot hold (, : \\)", root)
	}
	scratch := t.TempDir()
	sb := &sandbox{root: root, outDir: filepath.Join(scratch, "out"), procs: map[string]*proc{}}
	for _, d := range []string{"overlay", "tmp", "out"} {
		if err := os.Mkdir(filepath.Join(scratch, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb.env = commandEnv(filepath.Join(scratch, "tmp"))
	h := &proc{out: filepath.Join(sb.outDir, "holder"), done: make(chan struct{})}
	f, err := os.Create(h.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h.cmd = exec.Command("unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "--propagation", "private",
		"sh", "-ec", holderScript, "holder", root, filepath.Join(scratch, "overlay"))
	h.cmd.Stdout, h.cmd.Stderr = f, f
	if sb.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("sandbox: %v (it needs unshare from util-linux)", err)
	}
	sb.holder = h
	go func() { h.err = h.cmd.Wait(); close(h.done) }()
	t.Cleanup(func() { sb.close(t) })
	if err := waitOutput(h.out, 0, `(?m)^ready$`, holderTimeout, h.done); err != nil {
		t.Fatalf("sandbox: %v (it needs root, unshare and ip):\n%s", err, tail(h.out))
	}
	// unshare itself is in the new mount and network namespaces; the
	// PID namespace is its children's.
	ns := "/proc/" + strconv.Itoa(h.cmd.Process.Pid) + "/ns/"
	sb.nsArgs = []string{"--mount=" + ns + "mnt", "--net=" + ns + "net", "--pid=" + ns + "pid_for_children"}
	return sb
}

// commandEnv is the test's environment as a user's shell would have it:
// without LEGATION_* variables (they would change what the commands do)
// and make's (the outer make's jobserver), with TMPDIR set to tmp.
func commandEnv(tmp string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "LEGATION_"), k == "TMPDIR", k == "MAKEFLAGS", k == "MAKELEVEL", k == "MFLAGS":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "TMPDIR="+tmp)
}

// close ends the sandbox: the holder's exit kills every process of the
// PID namespace, and the namespaces go with the last of them.
func (sb *sandbox) close(t *testing.T) {
	sb.stdin.Close()
	select {
	case <-sb.holder.done:
		if sb.holder.err != nil {
			t.Errorf("sandbox: the holder: %v:\n%s", sb.holder.err, tail(sb.holder.out))
		}
	case <-time.After(holderTimeout):
		t.Errorf("sandbox: the holder did not exit within %s; killed", holderTimeout)
		_ = sb.holder.cmd.Process.Kill()
		<-sb.holder.done
	}
	for _, p := range sb.started {
		select {
		case <-p.done:
		case <-time.After(holderTimeout):
			t.Errorf("sandbox: %v did not exit with the sandbox; killed", p.cmd.Args[len(p.cmd.Args)-1])
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

// runPage runs page's blocks in order, each to its end or its ready
// output, then checks that the start blocks that exited did so with 0.
func (sb *sandbox) runPage(t *testing.T, page string, blocks []cmdBlock) {
	left := map[string]bool{} // ids of start blocks left out
	for i, b := range blocks {
		where := b.where(page)
		if b.action == "skip" {
			continue
		}
		if why := leaveOut(b, left); why != "" {
			t.Logf("%s: left out: %s", where, why)
			if b.id != "" {
				left[b.id] = true
			}
			continue
		}
		begun := time.Now()
		if b.action == "start" {
			sb.start(t, where, i, b)
		} else {
			sb.run(t, where, i, b)
		}
		t.Logf("%s: %s took %s", where, b.action, time.Since(begun).Round(100*time.Millisecond))
	}
	for _, p := range sb.started {
		select {
		case <-p.done:
			if p.err != nil {
				t.Errorf("a start block exited before the page's end: %v:\n%s", p.err, tail(p.out))
			}
		default:
		}
	}
}

// leaveOut says why b is not run, if it is not: what it needs is not on
// PATH, or the start block it watches was left out.
func leaveOut(b cmdBlock, left map[string]bool) string {
	if b.needs != "" {
		if _, err := exec.LookPath(b.needs); err != nil {
			return "it needs " + b.needs + ", not on PATH"
		}
	}
	if b.of != "" && left[b.of] {
		return "the block " + b.of + " was left out"
	}
	return ""
}

// start starts b and waits for its ready output.
func (sb *sandbox) start(t *testing.T, where string, i int, b cmdBlock) {
	p := sb.spawn(t, i, b)
	if err := waitOutput(p.out, 0, b.ready, readyTimeout, p.done); err != nil {
		t.Fatalf("%s: start: %v:\n%s", where, err, tail(p.out))
	}
	if b.id != "" {
		sb.procs[b.id] = p
	}
}

// run runs b to its end, then checks its output, or that of the start
// block it names.
func (sb *sandbox) run(t *testing.T, where string, i int, b cmdBlock) {
	of := sb.procs[b.of]
	var from int64
	if of != nil {
		if st, err := os.Stat(of.out); err == nil {
			from = st.Size()
		}
	}
	p := sb.spawn(t, i, b)
	select {
	case <-p.done:
	case <-time.After(runTimeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		t.Fatalf("%s: still running after %s; killed:\n%s", where, runTimeout, tail(p.out))
	}
	if p.err != nil {
		t.Fatalf("%s: %v:\n%s", where, p.err, tail(p.out))
	}
	switch {
	case of != nil:
		if err := waitOutput(of.out, from, b.want, ofTimeout, of.done); err != nil {
			t.Fatalf("%s: of=%s: %v:\n%s", where, b.of, err, tail(of.out))
		}
	case b.want != "":
		if err := waitOutput(p.out, 0, b.want, 0, p.done); err != nil {
			t.Fatalf("%s: %v:\n%s", where, err, tail(p.out))
		}
	}
}

// spawn starts b's script in the sandbox, from the repository's root, in a
// process group of its own, its output to a file (so that what it leaves
// in the background holds no pipe of the test's).
func (sb *sandbox) spawn(t *testing.T, i int, b cmdBlock) *proc {
	p := &proc{out: filepath.Join(sb.outDir, fmt.Sprintf("block-%02d", i)), done: make(chan struct{})}
	f, err := os.Create(p.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	script := "cd " + shellQuote(sb.root) + "\n" + b.script
	p.cmd = exec.Command("nsenter", append(append([]string{}, sb.nsArgs...), "--", "sh", "-ec", script)...)
	p.cmd.Env = sb.env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("nsenter: %v", err)
	}
	sb.started = append(sb.started, p)
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p
}

// waitOutput waits until the file at path, from byte from on, matches re
// (with `.` matching newlines), for at most timeout (0: looks once). It
// fails once done is closed (the writer exited) with no match.
func waitOutput(path string, from int64, re string, timeout time.Duration, done <-chan struct{}) error {
	rx := regexp.MustCompile("(?s)" + re)
	deadline := time.Now().Add(timeout)
	for {
		exited := isClosed(done) // before the read: output then is final
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if int64(len(b)) >= from && rx.Match(b[from:]) {
			return nil
		}
		switch {
		case exited && timeout > 0:
			return fmt.Errorf("exited with no output matching %q", re)
		case !time.Now().Before(deadline):
			return fmt.Errorf("no output matching %q within %s", re, timeout)
		}
		time.Sleep(pollInterval)
	}
}

// isClosed says whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// tail is the end of the file at path, for a failure's message.
func tail(path string) string {
	const keep = 6000
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > keep {
		return "..." + string(b[len(b)-keep:])
	}
	return string(b)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
