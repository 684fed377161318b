package demo_test

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/demo"
)

// TestRunStackFailsClearly: RunStack names what went wrong when xds-node
// cannot start, exits before it is ready, or another process already
// answers on its HTTP address, and stops there.
func TestRunStackFailsClearly(t *testing.T) {
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Fatalf("no false binary to stand for a failing xds-node: %v", err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	free.Close()

	for _, tc := range []struct {
		name, xdsNode, httpAddr, want string
	}{
		{"no binary", "/nonexistent/xds-node", freeAddr, "start xds-node (make build puts it in bin/)"},
		{"xds-node exits", falseBin, freeAddr, "xds-node exited (exit status 1)"},
		{"address in use", falseBin, busy.Addr().String(), busy.Addr().String() + " is in use"},
		{"no xds-node named", "", freeAddr, "the xds-node and xdsadmin binaries must be named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := demo.DefaultStackConfig()
			cfg.XDSNode, cfg.HTTPAddr, cfg.Out = tc.xdsNode, tc.httpAddr, nil
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			start := time.Now()
			err := demo.RunStack(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RunStack: %v, want an error containing %q", err, tc.want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("RunStack took %s to fail", d)
			}
		})
	}
}
