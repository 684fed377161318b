package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// StackConfig is what `legation-demo run` starts: xds-node in dev mode as
// a process, the echo backends in this process, examples/ applied with the
// xdsadmin binary, and the client.
type StackConfig struct {
	// XDSNode and XDSAdmin are the paths of the two binaries.
	XDSNode, XDSAdmin string
	// Examples is the file or directory applied with `xdsadmin apply -f`.
	Examples string
	// DataDir is dev mode's etcd data directory; empty: a new temporary
	// directory, removed at the end (each run starts from nothing).
	DataDir string
	// HTTPAddr is xds-node's HTTP address, polled for /readyz (dev mode's
	// default: 127.0.0.1:18001).
	HTTPAddr string
	// Backends are the echo backends started, in order: name and
	// host:port, as examples/endpoints.yaml places them.
	Backends [][2]string
	// Client is the demo client; Interval paces its calls and Window is
	// the span of each split printed.
	Client           ClientConfig
	Interval, Window time.Duration
	// Out receives the progress and one line per window.
	Out io.Writer
	// NodeArgs are more flags for xds-node (addresses other than dev
	// mode's, for tests), AdminArgs flags for xdsadmin before its command
	// (--etcd-endpoints to match).
	NodeArgs, AdminArgs []string
	// OnSplit, if set, is also handed each window's Split, from the
	// client's goroutine (it must not block for long).
	OnSplit func(Split)
}

// DefaultStackConfig is `make demo`: the binaries of bin/, examples/, dev
// mode's addresses and the backends examples/endpoints.yaml names.
func DefaultStackConfig() StackConfig {
	return StackConfig{
		XDSNode:  "bin/xds-node",
		XDSAdmin: "bin/xdsadmin",
		Examples: "examples/",
		HTTPAddr: "127.0.0.1:18001",
		Backends: [][2]string{{"backend-a", "127.0.0.1:50051"}, {"backend-b", "127.0.0.1:50052"}},
		Client:   DefaultClientConfig(),
		Interval: 5 * time.Millisecond,
		Window:   time.Second,
		Out:      os.Stdout,
	}
}

// RunStack starts everything cfg names, prints the split each window, and
// when ctx ends stops it all (xds-node with SIGINT, then SIGKILL after
// 10 s) and returns nil. It returns an error, having stopped what it
// started, when a part fails to start or xds-node exits.
func RunStack(ctx context.Context, cfg StackConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	dir := cfg.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "legation-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "legation-data")
	}
	// Beside the data directory: the temporary one, or the one given.
	logPath := filepath.Join(filepath.Dir(dir), "xds-node.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("demo: xds-node log: %w", err)
	}
	defer logFile.Close()

	node, err := startNode(cfg, dir, logFile, logPath)
	if err != nil {
		return err
	}
	defer node.stop()
	if err := waitReady(ctx, cfg.HTTPAddr, node.exited); err != nil {
		if errors.Is(err, errExited) {
			return node.failed()
		}
		return err
	}
	fmt.Fprintf(cfg.Out, "legation-demo: xds-node in dev mode, xDS on %s, data in %s, log in %s\n", cfg.Client.XDSServer, dir, logPath)

	stopBackends, err := startBackends(cfg)
	if err != nil {
		return err
	}
	defer stopBackends()
	if err := applyExamples(ctx, cfg); err != nil {
		return err
	}
	return callClient(ctx, cfg, node)
}

// validate checks the fields RunStack needs.
func (cfg *StackConfig) validate() error {
	switch {
	case cfg.XDSNode == "" || cfg.XDSAdmin == "":
		return errors.New("demo: the xds-node and xdsadmin binaries must be named")
	case cfg.Examples == "":
		return errors.New("demo: no examples to apply")
	case cfg.Interval <= 0 || cfg.Window <= 0:
		return fmt.Errorf("demo: client: interval %s and window %s must be > 0", cfg.Interval, cfg.Window)
	}
	return nil
}

// nodeProc is the xds-node process of the demo.
type nodeProc struct {
	cmd     *exec.Cmd
	logPath string
	// exited is closed once the process has exited, with waitErr set.
	exited  chan struct{}
	waitErr error
}

// startNode starts xds-node in dev mode with its data in dir and its
// output in logFile, at logPath; it refuses to when something answers on
// the HTTP address already.
func startNode(cfg StackConfig, dir string, logFile *os.File, logPath string) (*nodeProc, error) {
	// Another replica (a make run) answering on the HTTP address would
	// pass for this one.
	if c, err := net.DialTimeout("tcp", cfg.HTTPAddr, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("demo: %s is in use (an xds-node of make run?): stop it first", cfg.HTTPAddr)
	}
	cmd := exec.Command(cfg.XDSNode, append([]string{"--data-dir", dir}, cfg.NodeArgs...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start xds-node (make build puts it in bin/): %w", err)
	}
	n := &nodeProc{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		n.waitErr = cmd.Wait()
		close(n.exited)
	}()
	return n, nil
}

// stop stops the process, if it still runs: SIGINT, then SIGKILL after
// 10 s.
func (n *nodeProc) stop() {
	select {
	case <-n.exited:
		return
	default:
	}
	n.cmd.Process.Signal(os.Interrupt) //nolint:errcheck // it may have exited already
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		n.cmd.Process.Kill() //nolint:errcheck // as above
		<-n.exited
	}
}

// failed is the error of a process that exited (call it once exited is
// closed), with the end of its log.
func (n *nodeProc) failed() error {
	werr := n.waitErr // read after exited is closed
	tail, _ := os.ReadFile(n.logPath)
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return fmt.Errorf("demo: xds-node exited (%v); the end of its log:\n%s", werr, tail)
}

// startBackends starts cfg's echo backends in order; the returned func
// stops them, the last started first. On an error it stops those
// started.
func startBackends(cfg StackConfig) (stop func(), err error) {
	var started []*Backend
	stop = func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].Stop()
		}
	}
	for _, nb := range cfg.Backends {
		b, err := StartBackend(nb[0], nb[1])
		if err != nil {
			stop()
			return nil, err
		}
		started = append(started, b)
		fmt.Fprintf(cfg.Out, "legation-demo: echo backend %s on %s\n", b.Name, b.Addr())
	}
	return stop, nil
}

// applyExamples runs `xdsadmin apply -f` on cfg's examples, printing the
// command and its output.
func applyExamples(ctx context.Context, cfg StackConfig) error {
	args := append(slices.Clone(cfg.AdminArgs), "apply", "-f", cfg.Examples)
	fmt.Fprintf(cfg.Out, "$ %s %s\n", cfg.XDSAdmin, strings.Join(args, " "))
	var applyErr bytes.Buffer
	apply := exec.CommandContext(ctx, cfg.XDSAdmin, args...)
	apply.Stdout, apply.Stderr = cfg.Out, &applyErr
	if err := apply.Run(); err != nil {
		return fmt.Errorf("demo: xdsadmin apply -f %s: %w\n%s", cfg.Examples, err, applyErr.String())
	}
	return nil
}

// callClient runs the client, printing the split each window, until ctx
// ends (nil) or the client or node fails.
func callClient(ctx context.Context, cfg StackConfig, node *nodeProc) error {
	cc, err := Dial(cfg.Client)
	if err != nil {
		return err
	}
	defer cc.Close()
	fmt.Fprintf(cfg.Out, "legation-demo: calling %s as node %q (scope %q); the split each %s (Ctrl-C stops the demo):\n",
		cfg.Client.Target, cfg.Client.NodeID, cfg.Client.NodeCluster, cfg.Window)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, cc, cfg.Interval, cfg.Window, func(s Split) {
			fmt.Fprintf(cfg.Out, "%s  %s\n", s.End.Format(time.TimeOnly), s)
			if cfg.OnSplit != nil {
				cfg.OnSplit(s)
			}
		})
	}()
	select {
	case <-node.exited:
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			return err
		}
		if ctx.Err() != nil {
			// Ctrl-C reaches xds-node too (one process group): not a failure.
			return nil
		}
		return node.failed()
	case err := <-done:
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
}

var errExited = errors.New("xds-node exited")

// waitReady polls http://addr/readyz until it answers 200, for up to a
// minute, or until the process ends (exited).
func waitReady(ctx context.Context, addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(time.Minute)
	c := &http.Client{Timeout: time.Second}
	var last string
	for {
		resp, err := c.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: xds-node not ready on %s within a minute: %s", addr, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errExited
		case <-time.After(100 * time.Millisecond):
		}
	}
}
