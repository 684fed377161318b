//go:build e2e

package demo_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/tools/demo"
)

// TestRunStackProcesses is `make demo` and the demo page's second terminal as
// processes: RunStack starts the xds-node binary in dev mode and applies
// examples/ with the xdsadmin binary; the xdsadmin binary then applies the
// 9:1 override with a TTL, as docs/getting-started/demo.md does. Addresses are free ports
// rather than dev mode's defaults, so that it runs beside anything.
func TestRunStackProcesses(t *testing.T) {
	bin := t.TempDir()
	for _, cmd := range []string{"xds-node", "xdsadmin"} {
		build := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "./cmd/"+cmd)
		build.Dir = "../../.."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", cmd, err, out)
		}
	}
	addrs := testbase.FreeAddrs(t, 6)
	etcdAddr, xdsAddr, httpAddr, gossipAddr := addrs[0], addrs[1], addrs[2], addrs[3]
	ports := strings.NewReplacer("127.0.0.1:50051", addrs[4], "127.0.0.1:50052", addrs[5],
		"port_value: 50051", "port_value: "+port(addrs[4]), "port_value: 50052", "port_value: "+port(addrs[5]))
	examples := copyYAML(t, "../../../examples", ports)
	override := copyYAML(t, "../../../examples/demo", ports)

	cfg := demo.DefaultStackConfig()
	cfg.XDSNode, cfg.XDSAdmin = filepath.Join(bin, "xds-node"), filepath.Join(bin, "xdsadmin")
	cfg.Examples = examples
	cfg.HTTPAddr = httpAddr
	cfg.Backends = [][2]string{{"backend-a", addrs[4]}, {"backend-b", addrs[5]}}
	cfg.Client.XDSServer = xdsAddr
	cfg.Interval, cfg.Window = interval, window
	cfg.NodeArgs = []string{"--dev-etcd-addr", etcdAddr, "--xds-addr", xdsAddr, "--http-addr", httpAddr, "--gossip-addr", gossipAddr}
	cfg.AdminArgs = []string{"--etcd-endpoints", etcdAddr}
	var out strings.Builder
	cfg.Out = &out
	splits := make(chan demo.Split, 1000)
	cfg.OnSplit = func(s demo.Split) { splits <- s }

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- demo.RunStack(ctx, cfg) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("RunStack: %v", err)
			}
		case <-time.After(testTimeout):
			t.Errorf("RunStack did not return %s after its ctx ended", testTimeout)
		}
		t.Logf("the demo's output:\n%s", out.String())
	}()

	even := func(s demo.Split) bool { return s.Share("backend-a") >= 0.3 && s.Share("backend-a") <= 0.7 }
	waitSplit(t, splits, "an even split", even)
	applied := time.Now()
	args := []string{"--etcd-endpoints", etcdAddr, "apply", "-f", filepath.Join(override, "weights-9-1.yaml"), "--scope", "demo", "--ttl", ttl.String()}
	if b, err := exec.Command(cfg.XDSAdmin, args...).CombinedOutput(); err != nil {
		t.Fatalf("xdsadmin %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	waitSplit(t, splits, "backend-a at 80% or more after the 9:1 override", func(s demo.Split) bool { return s.Share("backend-a") >= 0.8 })
	back := waitSplit(t, splits, "an even split again after the override's TTL", even)
	if back.Sub(applied) < ttl {
		t.Fatalf("the split was even again %s after the apply, before the %s TTL ran out", back.Sub(applied), ttl)
	}
}

func port(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		panic(fmt.Sprintf("%s: %v", addr, err))
	}
	return p
}
