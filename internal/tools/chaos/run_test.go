package chaos_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/replicatest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tools/chaos"
	"github.com/legation-io/legation/internal/tools/chaos/record"
	"github.com/legation-io/legation/internal/tools/loadgen"
)

// startReplica runs a dev-mode replica until the test ends and returns it,
// an etcd client of its embedded etcd and its prefix.
func startReplica(t *testing.T) (*replica.Node, *clientv3.Client, string) {
	t.Helper()
	cfg := replicatest.DevConfig(t)
	n := replicatest.Run(t, cfg)
	etcdAddr := cfg.DevEtcdAddr
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return n, cli, cfg.EtcdPrefix
}

// cutProxy forwards TCP connections to target and can cut every one of
// them at once, so that the clients' streams end and they reconnect.
type cutProxy struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn // guarded by mu: both ends of every connection
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.l.Addr().String() }

// cut closes every connection open.
func (p *cutProxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// recordedRun runs the load tool's SotW and delta clients through a proxy
// to a real replica, recording what they receive and etcd's history, with
// a few updates and cuts of every connection (clients resuming with
// resume), and checks the recording.
func recordedRun(t *testing.T, resume bool, cuts int) (chaos.Report, []record.Event, *chaos.History, *chaos.HistoryRecorder) {
	n, cli, prefix := startReplica(t)
	proxy := newCutProxy(t, n.XDSAddr())
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
	w, err := record.Create(recPath)
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
		cfg.XDSAddr = proxy.addr()
		cfg.Delta = delta
		cfg.Streams = 6
		cfg.Conns = 2
		cfg.Clusters = 5
		cfg.Endpoints = 3
		cfg.Listeners = 2
		cfg.Updates = 6
		cfg.Interval = 50 * time.Millisecond
		cfg.Idle = 300 * time.Millisecond // the other run's last updates arrive meanwhile
		cfg.SyncTimeout = xdstest.Timeout
		cfg.UpdateTimeout = xdstest.Timeout
		cfg.BackoffBase = 20 * time.Millisecond
		cfg.BackoffMax = 100 * time.Millisecond
		cfg.Resume = resume
		cfg.Recorder = w
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*xdstest.Timeout)
			defer cancel()
			_, err := loadgen.Run(ctx, cfg)
			errs <- err
		}()
	}
	// The faults: every connection cut, every 150 ms, while the runs go.
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for done := 0; done < 2; {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("loadgen.Run: %v", err)
			}
			done++
		case <-tick.C:
			if cuts > 0 {
				cuts--
				proxy.cut()
			}
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
	events, err := record.ReadEventsFile(recPath)
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
	if rep.Unknown != 0 || hr.Gaps() != 0 {
		t.Errorf("%d responses at unknown revisions, %d gaps in the history; want none", rep.Unknown, hr.Gaps())
	}
	t.Logf("%d events, %d responses checked, history [%d, %d]", len(events), rep.Responses, h.Start, h.Last)
	return rep, events, h, hr
}

// streams counts the stream starts of a recording, and those that
// presented versions.
func streams(events []record.Event) (starts, presented int) {
	for _, e := range events {
		if e.Kind == record.KindStart {
			starts++
			if len(e.Presented) > 0 {
				presented++
			}
		}
	}
	return starts, presented
}

// TestRecordedRunChecksClean runs the load tool's SotW and delta clients
// against a real replica, recording what they receive and etcd's history,
// with a few updates; the checker must find every response consistent
// with the history and every client converged.
func TestRecordedRunChecksClean(t *testing.T) {
	rep, events, _, _ := recordedRun(t, false, 0)
	if starts, _ := streams(events); starts != 12 || rep.Responses < 12*4 {
		t.Errorf("%d streams, %d responses checked; want 12 streams, at least 48 responses", starts, rep.Responses)
	}
}

// TestRecordedRunWithCutsChecksClean is the same with every connection
// cut three times during the run and the clients resuming as Envoy does
// (loadgen.Config.Resume): reconnects present versions, so the checks
// across reconnects and of initial_resource_versions apply.
func TestRecordedRunWithCutsChecksClean(t *testing.T) {
	rep, events, _, _ := recordedRun(t, true, 3)
	starts, presented := streams(events)
	if starts <= 12 || presented == 0 {
		t.Errorf("%d streams, %d presenting versions; want more than 12 (reconnects), some presenting", starts, presented)
	}
	t.Logf("%d streams, %d presenting, converged %s after the heal", starts, presented, rep.Converge)
}
