package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/legation-io/legation/internal/tools/loadgen"
)

// workerEnv, set to 1, makes xds-loadgen a worker process of another
// (--processes): it serves loadgen.ServeWorker on its stdin and stdout.
const workerEnv = "XDS_LOADGEN_WORKER"

// serveWorker runs this process as a worker until its stdin ends, and
// returns its exit code.
func serveWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := loadgen.ServeWorker(ctx, stdio{}); err != nil {
		fmt.Fprintf(os.Stderr, "xds-loadgen worker: %v\n", err)
		return 1
	}
	return 0
}

// stdio is this process's stdin and stdout as one conn.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error                { return os.Stdin.Close() }

// startWorker starts this executable as a worker (loadgen.Config's
// StartWorker), its errors on this process's stderr.
func startWorker(ctx context.Context) (io.ReadWriteCloser, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &workerConn{WriteCloser: in, out: out, cmd: cmd}, nil
}

// workerConn is a worker's stdin and stdout.
type workerConn struct {
	io.WriteCloser
	out io.Reader
	cmd *exec.Cmd
}

func (w *workerConn) Read(p []byte) (int, error) { return w.out.Read(p) }

// workerExit is how long a worker has to end its clients once its stdin
// is closed, before it is killed.
const workerExit = 30 * time.Second

// Close closes the worker's stdin, which ends it, and waits for it.
func (w *workerConn) Close() error {
	w.WriteCloser.Close()
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(workerExit):
		kill := w.cmd.Process.Kill()
		return errors.Join(errors.New("xds-loadgen: a worker did not end in time; killed"), kill, <-done)
	}
}
