package demo_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/replicatest"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/tools/demo"
)

const (
	// testTimeout bounds what must happen.
	testTimeout = 30 * time.Second
	// window is the client's reporting window; interval paces its calls
	// (at most 500 a second, some 250 a window).
	window   = 500 * time.Millisecond
	interval = 2 * time.Millisecond
	// ttl is the override's TTL: short, but long enough for several
	// windows at 9:1 before it expires.
	ttl = 4 * time.Second
)

// TestDemoSplitFollowsWeightsAndTTL is `make demo` headless: dev-mode
// Legation (a replica on an embedded etcd), the two echo backends,
// examples/ applied with xdsadmin, and the demo's proxyless gRPC client
// calling xds:///echo. The split starts even (examples/endpoints.yaml: two
// localities at 1:1), moves to about 9:1 once examples/demo/weights-9-1.yaml
// is applied to the client's scope with a TTL, and comes back to even when
// the TTL runs out and the default-scope endpoints replace the override.
func TestDemoSplitFollowsWeightsAndTTL(t *testing.T) {
	checkLeaks(t)
	etcd := storetest.Start(t, storetest.Options{})
	xdsAddr := startNode(t, etcd.Endpoint)

	a, err := demo.StartBackend("backend-a", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	b, err := demo.StartBackend("backend-b", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()

	// examples/ and the override as docs/getting-started/demo.md applies them, with the
	// backends' ports in place of 50051 and 50052.
	ports := strings.NewReplacer("port_value: 50051", fmt.Sprintf("port_value: %d", a.Port()),
		"port_value: 50052", fmt.Sprintf("port_value: %d", b.Port()))
	examples := copyYAML(t, "../../../examples", ports)
	override := copyYAML(t, "../../../examples/demo", ports)
	xdsadmin(t, etcd.Endpoint, "apply", "-f", examples)

	cfg := demo.DefaultClientConfig()
	cfg.XDSServer = xdsAddr
	cc, err := demo.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	splits := make(chan demo.Split, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(ctx, cc, interval, window, func(s demo.Split) {
			t.Logf("%s", s)
			splits <- s
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("demo.Run: %v, want context.Canceled", err)
		}
	}()

	// even: backend-a answers between 30% and 70% (1:1, picked at random
	// per call); nine-to-one: at least 80% (90% expected).
	even := func(s demo.Split) bool { return s.Share("backend-a") >= 0.3 && s.Share("backend-a") <= 0.7 }
	nineToOne := func(s demo.Split) bool { return s.Share("backend-a") >= 0.8 && s.Counts["backend-b"] > 0 }

	waitSplit(t, splits, "an even split", even)
	applied := time.Now()
	xdsadmin(t, etcd.Endpoint, "apply", "-f", filepath.Join(override, "weights-9-1.yaml"), "--scope", "demo", "--ttl", ttl.String())
	moved := waitSplit(t, splits, "backend-a at 80% or more after the 9:1 override", nineToOne)
	if moved.Sub(applied) >= ttl {
		t.Fatalf("the split moved %s after the apply, no sooner than the %s TTL: the override was not seen while it lived", moved.Sub(applied), ttl)
	}
	back := waitSplit(t, splits, "an even split again after the override's TTL", even)
	// A window that ends before the lease can have expired holds calls
	// made at 9:1 only: back to even earlier would be a wrong split.
	if back.Sub(applied) < ttl {
		t.Fatalf("the split was even again %s after the apply, before the %s TTL ran out", back.Sub(applied), ttl)
	}
	t.Logf("9:1 from %s after the apply, even again %s after it (TTL %s)",
		moved.Sub(applied).Round(time.Millisecond), back.Sub(applied).Round(time.Millisecond), ttl)
}

// waitSplit reads windows until one with enough calls (100) satisfies ok
// and returns its end, failing the test after testTimeout.
func waitSplit(t *testing.T, splits <-chan demo.Split, what string, ok func(demo.Split) bool) time.Time {
	t.Helper()
	deadline := time.After(testTimeout)
	var last demo.Split
	for {
		select {
		case s := <-splits:
			if s.Total() >= 100 && ok(s) {
				return s.End
			}
			last = s
		case <-deadline:
			t.Fatalf("no %s within %s; last window: %s", what, testTimeout, last)
		}
	}
}

// startNode runs a replica on etcd at endpoint, as dev mode does on its
// embedded one, until the test ends, and returns its xDS address.
func startNode(t *testing.T, endpoint string) string {
	t.Helper()
	cfg := replica.DefaultConfig()
	cfg.EtcdEndpoints = []string{endpoint}
	cfg.XDSAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Name = "demo-test"
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Registerer = prometheus.NewRegistry()
	return replicatest.Run(t, cfg).XDSAddr()
}

// copyYAML copies dir's *.yaml files to a new directory with r applied to
// their text and returns it.
func copyYAML(t *testing.T, dir string, r *strings.Replacer) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML in %s: %v", dir, err)
	}
	out := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Base(f)), []byte(r.Replace(string(b))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// xdsadmin runs xdsadmin in-process against etcd at endpoint and fails the
// test unless it succeeds.
func xdsadmin(t *testing.T, endpoint string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	args = append([]string{"--etcd-endpoints", endpoint}, args...)
	if code := adminctl.Run(ctx, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("xdsadmin %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	t.Logf("xdsadmin %s:\n%s", strings.Join(args[2:], " "), out.String())
}

// checkLeaks fails the test if goroutines started during it still run once
// every later cleanup has run (call it first). Closed channels and xDS
// clients end their goroutines asynchronously: it polls for testTimeout.
func checkLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		deadline := time.Now().Add(testTimeout)
		for {
			err := goleak.Find(ignore)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left running %s after the test: %v", testTimeout, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}
