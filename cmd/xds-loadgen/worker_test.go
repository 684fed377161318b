package main

import (
	"context"
	"net/rpc"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as a worker when startWorker runs
// it, as xds-loadgen runs itself.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(serveWorker())
	}
	os.Exit(m.Run())
}

// TestStartWorker: startWorker runs this executable as a worker, which
// answers over its stdin and stdout (a worker not yet opened refuses to
// tally, naming why), and ends cleanly once its stdin is closed.
func TestStartWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := startWorker(ctx)
	if err != nil {
		t.Fatalf("startWorker: %v", err)
	}
	c := rpc.NewClient(conn)
	var out struct{}
	err = c.Call("Worker.Start", &struct{}{}, &out)
	if err == nil || !strings.Contains(err.Error(), "not opened") {
		t.Errorf("Start before Open = %v, want the worker's error: not opened", err)
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("closing the worker: %v, want a clean exit", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the worker took %s to end after its stdin closed", d)
	}
}
