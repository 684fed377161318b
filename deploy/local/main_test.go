package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/localcluster"
)

// testTimeout bounds what must happen.
const testTimeout = 60 * time.Second

// mainEnv makes this test binary the command itself (TestCommands starts
// `up` so).
const mainEnv = "LEGATION_LOCAL_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" {
		main()
	}
	os.Exit(m.Run())
}

// owner is a running `up` process.
type owner struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	exited chan struct{} // closed once cmd.Wait has returned
}

// startUp runs `up` with args in a process of its own and returns once it
// says it is up.
func startUp(t *testing.T, cfg localcluster.Config, args ...string) *owner {
	t.Helper()
	o := &owner{stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	o.cmd = exec.Command(os.Args[0], append([]string{"up"}, args...)...)
	o.cmd.Env = append(cfg.Env, mainEnv+"=1")
	o.cmd.Stderr = o.stderr
	out, err := o.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	setDeathSignal(o.cmd)
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(o.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		o.cmd.Wait() //nolint:errcheck // ProcessState says
	}()
	t.Cleanup(func() {
		o.cmd.Process.Kill() //nolint:errcheck // it may be gone: most tests end it
		<-o.exited
		if t.Failed() {
			t.Logf("up's stderr:\n%s", o.stderr)
		}
	})
	deadline := time.After(testTimeout)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				<-o.exited
				t.Fatalf("up exited before it was up: %v", o.cmd.ProcessState)
			}
			if strings.HasPrefix(l, "up: ") {
				go func() {
					for range lines {
					}
				}()
				return o
			}
		case <-deadline:
			t.Fatalf("up not up after %s", testTimeout)
		}
	}
}

// wait waits for the owner to exit and returns its exit code.
func (o *owner) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-o.exited:
		return o.cmd.ProcessState.ExitCode()
	case <-time.After(testTimeout):
		t.Fatalf("up still runs %s later", testTimeout)
		return -1
	}
}

// cli runs a command in-process, as a client of the owner, and returns
// its exit code and output.
func cli(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// must runs cli and fails the test unless it exits with want.
func must(t *testing.T, want int, args ...string) string {
	t.Helper()
	code, out := cli(t, args...)
	if code != want {
		t.Fatalf("%s: exit %d, want %d; output:\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}

// stateOf is NAME's STATE column in status's output.
func stateOf(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == name {
			return f[1]
		}
	}
	return ""
}

// TestCommands runs `up` as people do, drives it from another process
// with every command, stops it with down, runs it again on the same
// directory and stops that one with Ctrl-C (SIGINT): each time every
// process of the cluster is gone.
func TestCommands(t *testing.T) {
	cfg := localcluster.DefaultConfig()
	cfg.EtcdMembers, cfg.Replicas = 1, 2
	cfg = localcluster.ConfigForTest(t, cfg)
	dir := []string{"-dir", cfg.Dir}
	upArgs := append(dir, "-net", cfg.Net, "-etcd", "1", "-replicas", "2",
		"-bin", filepath.Dir(cfg.XDSNodeBin), "-xds-node-flags", "--shutdown-timeout 2s --drain-period 1s")

	must(t, 1, append([]string{"status"}, dir...)...) // nothing runs yet
	o := startUp(t, cfg, upArgs...)
	must(t, 1, append([]string{"up"}, upArgs...)...) // one owner per dir

	out := must(t, 0, append([]string{"status"}, dir...)...)
	for _, name := range []string{"etcd-1", "replica-1", "replica-2", "haproxy"} {
		if got := stateOf(out, name); got != "running" {
			t.Errorf("status: %s %q, want running:\n%s", name, got, out)
		}
	}
	if !strings.Contains(out, "/readyz via HAProxy 200") {
		t.Errorf("status does not show HAProxy answering:\n%s", out)
	}

	must(t, 0, append([]string{"kill", "replica-2"}, dir...)...)
	out = must(t, 3, append([]string{"status"}, dir...)...)
	if got := stateOf(out, "replica-2"); got != "gone" {
		t.Errorf("status after kill: replica-2 %q, want gone:\n%s", got, out)
	}
	must(t, 0, append([]string{"start", "replica-2"}, dir...)...)
	must(t, 0, append([]string{"freeze", "etcd-1"}, dir...)...)
	if got := stateOf(must(t, 0, append([]string{"status"}, dir...)...), "etcd-1"); got != "frozen" {
		t.Errorf("status after freeze: etcd-1 %q, want frozen", got)
	}
	must(t, 0, append([]string{"thaw", "etcd-1"}, dir...)...)
	must(t, 0, append([]string{"stop", "replica-1"}, dir...)...)
	must(t, 0, append([]string{"start", "replica-1"}, dir...)...)
	if out := must(t, 0, append([]string{"add-replica"}, dir...)...); !strings.Contains(out, "added replica-3") {
		t.Errorf("add-replica said %q", out)
	}
	must(t, 1, append([]string{"kill", "replica-9"}, dir...)...)
	must(t, 2, append([]string{"kill"}, dir...)...)
	must(t, 2, "frobnicate")

	if out := must(t, 0, append([]string{"down"}, dir...)...); !strings.Contains(out, "everything stopped") {
		t.Errorf("down said %q", out)
	}
	if code := o.wait(t); code != 0 {
		t.Errorf("up exited %d after down, want 0", code)
	}
	waitFree(t, cfg.Net, 3)
	must(t, 1, append([]string{"status"}, dir...)...)
	must(t, 0, append([]string{"down"}, dir...)...) // nothing to stop

	// Again on the same directory: it takes its settings (3 replicas
	// now) from there, and stops on Ctrl-C.
	o = startUp(t, cfg, "-dir", cfg.Dir, "-bin", filepath.Dir(cfg.XDSNodeBin), "-xds-node-flags", "--shutdown-timeout 2s --drain-period 1s")
	if got := stateOf(must(t, 0, append([]string{"status"}, dir...)...), "replica-3"); got != "running" {
		t.Errorf("up again: replica-3 %q, want running (REPLICAS from DIR/env)", got)
	}
	if err := o.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := o.wait(t); code != 0 {
		t.Errorf("up exited %d after SIGINT, want 0", code)
	}
	waitFree(t, cfg.Net, 3)
}

// waitFree waits until every address of a cluster of one etcd member,
// replicas replicas and HAProxy under prefix is free: its processes are
// gone.
func waitFree(t *testing.T, prefix string, replicas int) {
	t.Helper()
	addrs := []string{prefix + "1:18000", prefix + "1:18001", prefix + "11:2379", prefix + "11:2380"}
	for i := 1; i <= replicas; i++ {
		ip := fmt.Sprintf("%s%d", prefix, 20+i)
		addrs = append(addrs, ip+":18000", ip+":18001", ip+":7946")
	}
	deadline := time.Now().Add(testTimeout)
	for {
		var held []string
		for _, a := range addrs {
			l, err := net.Listen("tcp", a)
			if err != nil {
				held = append(held, a)
				continue
			}
			l.Close()
		}
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("addresses still held %s after up ended: %v", testTimeout, held)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
