package faults

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/localcluster"
)

// TestExecutorErrors: a fault on a process the cluster does not have is
// reported, naming it, and the run goes on; an ended ctx ends Run at once.
func TestExecutorErrors(t *testing.T) {
	cfg := localcluster.DefaultConfig()
	cfg.Dir, cfg.HAProxy, cfg.EtcdBin, cfg.XDSNodeBin = t.TempDir(), false, "/nonexistent/etcd", "/nonexistent/xds-node"
	c, err := localcluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := NewExecutor(c, nil)
	sched := []Fault{
		{At: 0, Kind: FreezeReplica, Target: "replica-9", For: time.Millisecond},
		{At: time.Millisecond, Kind: DelayEtcd, Target: "replica-1", For: time.Millisecond},
	}
	err = e.Run(context.Background(), sched)
	if err == nil || !strings.Contains(err.Error(), `no process "replica-9"`) || !strings.Contains(err.Error(), "replica-1 has no etcd proxies") {
		t.Fatalf("Run: %v", err)
	}
	if st := e.Stats(); st.Applied != 0 || st.Active != 0 {
		t.Errorf("stats %+v after faults that failed", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := e.Run(ctx, []Fault{{At: time.Hour, Kind: CompactEtcd}}); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("Run with a short ctx: %v after %s", err, time.Since(start))
	}
}
