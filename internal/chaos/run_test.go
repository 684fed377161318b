package chaos_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/chaos"
	"github.com/legation-io/legation/internal/loadgen"
	"github.com/legation-io/legation/internal/node"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/xdstest"
)

// startReplica runs a dev-mode replica until the test ends and returns it,
// an etcd client of its embedded etcd and its prefix.
func startReplica(t *testing.T) (*node.Node, *clientv3.Client, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	etcdAddr := l.Addr().String()
	l.Close()
	cfg := node.DefaultConfig()
	cfg.XDSAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.DevEtcdAddr = etcdAddr
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.DrainPeriod = 200 * time.Millisecond
	cfg.Registerer = prometheus.NewRegistry()
	n, err := node.New(cfg)
	if err != nil {
		t.Fatalf("node.New: %v", err)
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
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return n, cli, cfg.EtcdPrefix
}

// TestRecordedRunChecksClean runs the load tool's SotW and delta clients
// against a real replica, recording what they receive and etcd's history,
// with a few updates; the checker must find every response consistent
// with the history and every client converged.
func TestRecordedRunChecksClean(t *testing.T) {
	n, cli, prefix := startReplica(t)
	st, err := store.New(store.Config{Client: cli, Prefix: prefix, Writer: "chaos-test"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	histPath := filepath.Join(dir, "history.jsonl")
	hf, err := os.Create(histPath)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := chaos.NewHistoryRecorder(cli, prefix, hf)
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithCancel(context.Background())
	hdone := make(chan error, 1)
	go func() { hdone <- hr.Run(hctx) }()
	stopHistory := sync.OnceValue(func() error {
		hcancel()
		return <-hdone
	})
	defer func() { _ = stopHistory() }()
	select {
	case <-hr.Ready():
	case <-time.After(xdstest.Timeout):
		t.Fatalf("history recorder not ready: %v", stopHistory())
	}

	recPath := filepath.Join(dir, "recording.jsonl")
	w, err := chaos.Create(recPath)
	if err != nil {
		t.Fatal(err)
	}
	// Both runs at once, each writing to its clients' group scope (the
	// node cluster is the NodePrefix), so that the checker's scope model
	// is used and no client misses changes made after its run.
	errs := make(chan error, 2)
	for _, delta := range []bool{false, true} {
		cfg := loadgen.DefaultConfig()
		cfg.NodePrefix = map[bool]string{false: "chaos-sotw", true: "chaos-delta"}[delta]
		cfg.Target = &loadgen.StoreTarget{Store: st, Scope: cfg.NodePrefix}
		cfg.XDSAddr = n.XDSAddr()
		cfg.Delta = delta
		cfg.Streams = 6
		cfg.Conns = 2
		cfg.Clusters = 5
		cfg.Endpoints = 3
		cfg.Listeners = 2
		cfg.Updates = 4
		cfg.Interval = 20 * time.Millisecond
		cfg.Idle = 300 * time.Millisecond // the other run's last updates arrive meanwhile
		cfg.SyncTimeout = xdstest.Timeout
		cfg.UpdateTimeout = xdstest.Timeout
		cfg.Recorder = w
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*xdstest.Timeout)
			defer cancel()
			_, err := loadgen.Run(ctx, cfg)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("loadgen.Run: %v", err)
		}
	}
	heal := time.Now()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// The history must reach etcd's current revision before it is read.
	resp, err := cli.Get(context.Background(), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	xdstest.WaitFor(t, "the history at etcd's revision", func() (bool, string) {
		return hr.Last() >= resp.Header.Revision, ""
	})
	if err := stopHistory(); err != nil {
		t.Fatalf("history recorder: %v", err)
	}
	if err := hf.Close(); err != nil {
		t.Fatal(err)
	}

	h, err := chaos.ReadHistoryFile(histPath)
	if err != nil {
		t.Fatal(err)
	}
	events, err := chaos.ReadEventsFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	opts := chaos.DocumentedExceptions()
	opts.Heal = heal
	opts.Group = func(client string) string { return client[:strings.LastIndex(client, "-")] }
	rep := chaos.CheckRun(h, events, opts)
	for _, v := range rep.Violations {
		t.Error(v)
	}
	// Without the clients' groups they would have been sent what they
	// cannot see: the checker does compare.
	if vs := chaos.Check(h, events, chaos.DocumentedExceptions()); len(vs) == 0 {
		t.Error("Check without the clients' groups found nothing")
	}
	starts := 0
	for _, e := range events {
		if e.Kind == chaos.KindStart {
			starts++
		}
	}
	if starts != 12 || rep.Responses < 12*4 || rep.Unknown != 0 {
		t.Errorf("%d streams, %d responses checked (%d at unknown revisions); want 12 streams, at least 48 responses, none unknown",
			starts, rep.Responses, rep.Unknown)
	}
	if hr.Gaps() != 0 {
		t.Errorf("%d gaps in the history, want none", hr.Gaps())
	}
	t.Logf("%d events, %d responses checked, history [%d, %d]", len(events), rep.Responses, h.Start, h.Last)
}
