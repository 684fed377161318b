package localcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testTimeout bounds what must happen.
const testTimeout = 30 * time.Second

// ownerEnv, set to a Config as JSON, makes this test binary an owner
// (TestOwnerDies): it starts that cluster, says "up" on stdout, and runs
// until killed.
const ownerEnv = "LOCALCLUSTER_TEST_OWNER"

func TestMain(m *testing.M) {
	if cfgJSON := os.Getenv(ownerEnv); cfgJSON != "" {
		os.Exit(runOwner(cfgJSON))
	}
	os.Exit(m.Run())
}

func runOwner(cfgJSON string) int {
	var cfg Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := c.Up(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("up")
	select {} // until killed
}

// TestOwnerDies: a process owning a cluster is killed with SIGKILL, with
// no chance to stop anything: every process of the cluster dies with it,
// and every address is free again.
func TestOwnerDies(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EtcdMembers, cfg.Replicas = 1, 2
	cfg = ConfigForTest(t, cfg)
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	owner := exec.Command(os.Args[0], "-test.run=^$")
	owner.Env = append(os.Environ(), ownerEnv+"="+string(cfgJSON))
	var stderr strings.Builder
	owner.Stderr = &stderr
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	owner.SysProcAttr = sysProcAttr()
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- owner.Wait()
	}()
	t.Cleanup(func() {
		owner.Process.Kill() //nolint:errcheck // it may be gone: that is the test
		if err := <-exited; err == nil {
			t.Log("the owner exited cleanly before it was killed")
		}
	})
	select {
	case l := <-lines:
		if l != "up" {
			t.Fatalf("owner said %q, want up; stderr:\n%s", l, &stderr)
		}
	case <-time.After(3 * cfg.Timeout):
		t.Fatalf("owner not up after %s; stderr:\n%s", 3*cfg.Timeout, &stderr)
	}

	// The addresses of what it runs, and that they answer.
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := c.Status()
	probes := map[string]string{
		st.Etcd[0].ClientAddr:   "/health",
		st.Replicas[0].HTTPAddr: "/readyz",
		st.Replicas[1].HTTPAddr: "/readyz",
		st.HAProxy.HTTPAddr:     "/readyz",
	}
	for addr, path := range probes {
		if code, _, err := httpGet(context.Background(), addr, path); err != nil || code != http.StatusOK {
			t.Fatalf("GET %s%s: %d %v", addr, path, code, err)
		}
	}

	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, m := range st.Etcd {
		addrs = append(addrs, m.ClientAddr, m.PeerAddr)
	}
	for _, r := range st.Replicas {
		addrs = append(addrs, r.XDSAddr, r.HTTPAddr, r.GossipAddr)
	}
	addrs = append(addrs, st.HAProxy.XDSAddr, st.HAProxy.HTTPAddr)
	deadline := time.Now().Add(testTimeout)
	for {
		var held []error
		for _, a := range addrs {
			l, err := net.Listen("tcp", a)
			if err != nil {
				held = append(held, err)
				continue
			}
			l.Close()
		}
		if len(held) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the owner's SIGKILL, addresses still held: %v", testTimeout, errors.Join(held...))
		}
		time.Sleep(pollInterval)
	}
}
