// Package replicatest runs in-process replicas for the tests of the packages
// built on internal/replica (the load tool, the chaos checker, the demo).
package replicatest

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// DevConfig returns the config of a dev-mode replica for a test: its
// listeners on 127.0.0.1 at ports the system picks, its embedded etcd on
// a free port with its data in a directory removed after the test, a
// registry of its own, and a short shutdown and drain.
func DevConfig(t testing.TB) replica.Config {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	etcdAddr := l.Addr().String()
	l.Close()
	cfg := replica.DefaultConfig()
	cfg.XDSAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.DevEtcdAddr = etcdAddr
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.DrainPeriod = 200 * time.Millisecond
	cfg.Registerer = prometheus.NewRegistry()
	return cfg
}

// Run starts the replica of cfg, runs it until the test ends (an error
// of its Run fails the test then) and returns it once its /readyz says
// 200.
func Run(t testing.TB, cfg replica.Config) *replica.Node {
	t.Helper()
	n, err := replica.New(cfg)
	if err != nil {
		t.Fatalf("replica.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node Run: %v", err)
		}
	})
	xdstest.WaitFor(t, "the replica's /readyz 200", func() (bool, string) {
		resp, err := http.Get("http://" + n.HTTPAddr() + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return n
}
